#!/usr/bin/env bash
# Sets everything up and runs the whole test suite (slow tests included) on each TensorFlow the project runs on:
#   - the default one (requirements.txt, in .venv): every test but tf-models-official's, whose peer installs
#     with TensorFlow 2.20 only, and the slow tests marked second_tf;
#   - TensorFlow 2.20 (requirements-tf2.20.txt, in .venv-tf2.20): the fast tests but HF's, the clients' and those marked
#     default_tf (the main job's and the test command's own), the tests of tf-models-official, and the slow tests
#     marked both_tf or second_tf (-m "not slow or tf_models or both_tf or second_tf"; arguments of yours come
#     after and win).
# So every test runs, the product's fast tests on both versions, its slow ones (whole jobs, several processes,
# exports: the same code paths as the fast tests) once, split between the two (both_tf: on both): CI's 30
# minutes do not hold both passes in full. The two passes run side by side (each leaves
# part of CI's 2 cores idle: together they take little longer than one); the 2.20 pass's output follows the
# default's, and the exit status is 0 when both passed.
# BERT_TF_VERSION=X.Y runs that version's pass alone, in the foreground: BERT_TF_VERSION=2.20 bash scripts/test.sh
# Extra arguments go to pytest (in each pass), e.g. scripts/test.sh -m "not slow" -k tokenization
# Tests that read the shared data folder (../shared, or $BERT_SHARED_DIR) and find it missing fail the run, which
# ends with one line saying how many could not run and why (conftest.py); --data-free runs the data-free subset
# (those tests skip; never under CI=true).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DEFAULT="$(sed -n 's/^tensorflow==\([0-9]*\.[0-9]*\)\..*/\1/p' "$ROOT/requirements.txt")"

# One version's pass: its environment (scripts/setup.sh --dev), then pytest without the tests of the peers
# that are not installed there.
run_pass() {
  local version="$1" without=()
  shift
  [ "$version" = 2.20 ] || without+=(tf_models second_tf)
  local select=()
  [ "$version" = "$DEFAULT" ] || { without+=(hf clients default_tf); select=(-m "not slow or tf_models or both_tf or second_tf"); }
  BERT_TF_VERSION="$version" source "$ROOT/scripts/setup.sh" --dev || return
  cd "$ROOT" || return
  echo "[test] TensorFlow $version: python -m pytest --without=$(IFS=,; echo "${without[*]}") ${select[*]} $*"
  python -m pytest "--without=$(IFS=,; echo "${without[*]}")" "${select[@]}" "$@"
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
