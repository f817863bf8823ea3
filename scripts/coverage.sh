#!/usr/bin/env bash
# Line coverage of the product modules (the top-level *.py files) over the whole test suite, both passes, every
# Python process the tests start included (workers, scripts' command lines, clusters): coverage.py, started in
# each process by a .pth file of each test environment when COVERAGE_PROCESS_START names its settings.
# Usage: bash scripts/coverage.sh [pytest arguments]   -> the table on stdout, data and report in output/coverage/
# Runs scripts/test.sh (its environments set up as there); a process killed by SIGKILL leaves no data, as anywhere.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="$ROOT/output/coverage"
COVERAGE_VERSION=7.17.5
rm -rf "$OUT"
mkdir -p "$OUT/data"
cat > "$OUT/coveragerc" <<EOF
[run]
parallel = True
data_file = $OUT/data/.coverage
source = $ROOT
omit =
    $ROOT/tests/*
    $ROOT/benchmarks/*
    $ROOT/conftest.py
    $ROOT/.venv*/*
    $ROOT/output/*
concurrency = thread,multiprocessing
EOF
for version in "" 2.20; do
  BERT_TF_VERSION="$version" bash -c "source '$ROOT/scripts/setup.sh' --dev >/dev/null" || exit
  venv="$ROOT/.venv${version:+-tf$version}"
  "$venv/bin/python" -m pip install -q "coverage==$COVERAGE_VERSION"
  site="$("$venv/bin/python" -c 'import site; print(site.getsitepackages()[0])')"
  echo 'import os; os.environ.get("COVERAGE_PROCESS_START") and __import__("coverage").process_startup()' \
    > "$site/bert_coverage_startup.pth"
done
status=0
COVERAGE_PROCESS_START="$OUT/coveragerc" bash "$ROOT/scripts/test.sh" "$@" > "$OUT/test.log" 2>&1 || status=$?
tail -n 3 "$OUT/test.log"
"$ROOT/.venv/bin/python" -m coverage combine -q --rcfile="$OUT/coveragerc" 2>/dev/null || true
"$ROOT/.venv/bin/python" -m coverage report -i --rcfile="$OUT/coveragerc" | tee "$OUT/report.txt"
"$ROOT/.venv/bin/python" -m coverage json -i -q --rcfile="$OUT/coveragerc" -o "$OUT/coverage.json"
exit "$status"
