"""The scripts of benchmarks/ imported as modules, for their tests."""
import importlib.util
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def load_benchmark(script, name=None):
    """benchmarks/SCRIPT.py, imported now under `name` (default SCRIPT): module-level settings read os.environ
    at import, as in a run."""
    spec = importlib.util.spec_from_file_location(name or script, os.path.join(ROOT, "benchmarks", f"{script}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
