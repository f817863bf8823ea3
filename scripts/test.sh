#!/usr/bin/env bash
# Sets everything up and runs the whole test suite (slow tests included).
# Extra arguments go to pytest, e.g. scripts/test.sh -m "not slow" -k tokenization
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/scripts/setup.sh" --dev
cd "$ROOT"
exec python -m pytest "$@"
