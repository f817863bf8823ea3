#!/usr/bin/env bash
# Sets everything up and runs the whole test suite (slow tests included) on each TensorFlow the project runs on:
#   - the default one (requirements.txt, in .venv): every test but tf-models-official's, whose peer installs with
#     TensorFlow 2.20 only; in $BERT_TEST_WORKERS processes (pytest-xdist; default: the CPU count, at most 4),
#     each test module's tests in one of them (its module-scoped fixtures made once; the session's shared ones,
#     tests/fixtures.py, once for all of them);
#   - TensorFlow 2.20 (requirements-tf2.20.txt, in .venv-tf2.20): what can differ between TensorFlow versions,
#     chosen by one rule written once (conftest.py's SECOND_TF: the version checks, the checkpoint format,
#     tensorflow-text's ops, a SavedModel export and its signatures, the serving graph's limits and XLA's compiles,
#     TF Hub's and LiteRT's exports, one training curve), and the tests of tf-models-official (pytest --second-tf).
# Arguments of yours go to pytest in each pass, after these (they win): scripts/test.sh -m "not slow" -k tokeniz
# The two passes run side by side; the 2.20 pass's output follows the default's, and the exit status is 0 when
# both passed. BERT_TF_VERSION=X.Y runs that version's pass alone, in the foreground: BERT_TF_VERSION=2.20 bash
# scripts/test.sh
# Tests that read the shared data folder (../shared, or $BERT_SHARED_DIR) and find it missing fail the run, which
# ends with one line saying how many could not run and why (conftest.py); --data-free runs the data-free subset
# (those tests skip; never under CI=true).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DEFAULT="$(sed -n 's/^tensorflow==\([0-9]*\.[0-9]*\)\..*/\1/p' "$ROOT/requirements.txt")"

# One version's pass: its environment (scripts/setup.sh --dev), then pytest without the tests of the peers
# that are not installed there: the default TensorFlow's in worker processes, the other's on what can differ.
run_pass() {
  local version="$1" options=()
  shift
  if [ "$version" = "$DEFAULT" ]; then
    local workers="${BERT_TEST_WORKERS:-$(nproc 2>/dev/null || echo 2)}"
    [ "$workers" -le 4 ] || workers=4
    options=(--without=tf_models -n "$workers" --dist loadfile)
  else
    options=(--without=hf,clients --second-tf)
  fi
  BERT_TF_VERSION="$version" source "$ROOT/scripts/setup.sh" --dev || return
  cd "$ROOT" || return
  echo "[test] TensorFlow $version: python -m pytest ${options[*]} $*"
  python -m pytest "${options[@]}" "$@"
}

if [ -n "${BERT_TF_VERSION:-}" ]; then
  run_pass "$BERT_TF_VERSION" "$@"
  exit
fi
# One last line for both passes' tests that could not run for want of the shared data: each pass writes its count
# and its own last line ({tests} standing for the count) to $BERT_TEST_DATA_REPORT (conftest.py).
missing_data_line() {
  local total=0 parts="" line="" version count
  for version in "$DEFAULT" 2.20; do
    [ -s "$1/$version" ] || continue
    count="$(sed -n 1p "$1/$version")"
    [ "$count" -gt 0 ] || continue
    total=$((total + count))
    parts="${parts:+$parts, }$count on TensorFlow $version"
    line="$(sed -n 2p "$1/$version")"
  done
  [ "$total" -gt 0 ] || return 0
  echo "${line/"{tests}"/"$total tests ($parts)"}"
}

log="$(mktemp "${TMPDIR:-/tmp}/bert-test-tf2.20.XXXXXX")"
reports="$(mktemp -d "${TMPDIR:-/tmp}/bert-test-data.XXXXXX")"
trap 'rm -rf "$log" "$reports"' EXIT
( export BERT_TEST_DATA_REPORT="$reports/2.20"; run_pass 2.20 "$@" ) > "$log" 2>&1 &
other=$!
# Interrupted (Ctrl-C, or killed): the 2.20 pass in the background stops too.
stop_other() { pkill -TERM -P "$other" 2>/dev/null || true; kill "$other" 2>/dev/null || true; }
trap 'stop_other; exit 130' INT
trap 'stop_other; exit 143' TERM
status=0
( export BERT_TEST_DATA_REPORT="$reports/$DEFAULT"; run_pass "$DEFAULT" "$@" ) || status=$?
other_status=0
wait "$other" || other_status=$?
echo "[test] TensorFlow $DEFAULT: exit status $status; TensorFlow 2.20: exit status $other_status;" \
     "the 2.20 pass's output:"
cat "$log"
missing_data_line "$reports"
# pytest's 5 is "no test selected": arguments that select tests of one pass only leave none in the other.
ok() { [ "$1" = 0 ] || [ "$1" = 5 ]; }
ok "$status" && ok "$other_status" && ! { [ "$status" = 5 ] && [ "$other_status" = 5 ]; }
