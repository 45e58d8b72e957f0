#!/usr/bin/env bash
# README command 2: set up everything the tests need (idempotent), then run the whole suite.
# Extra arguments go to pytest (e.g. scripts/test.sh tests/unit -x).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$here"
bash scripts/setup.sh
bash scripts/system-deps.sh
export PATH="$here/.venv/bin:$PATH"
exec python -m pytest -p no:cacheprovider --timeout=1200 "${@:-tests}"
