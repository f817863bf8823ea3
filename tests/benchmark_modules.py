"""The scripts of benchmarks/ imported as modules, for their tests."""
import importlib.util
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCHMARKS = os.path.join(ROOT, "benchmarks")
if BENCHMARKS not in sys.path:
    sys.path.append(BENCHMARKS)  # a script's modules beside it import by name, as in `python benchmarks/SCRIPT.py`


def load_benchmark(script, name=None):
    """benchmarks/SCRIPT.py, imported now under `name` (default SCRIPT): module-level settings read os.environ
    at import, as in a run."""
    spec = importlib.util.spec_from_file_location(name or script, os.path.join(BENCHMARKS, f"{script}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
