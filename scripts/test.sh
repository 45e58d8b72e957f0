#!/usr/bin/env bash
# README command 2: set up everything the tests need (idempotent), then run the whole suite.
# Extra arguments go to pytest (e.g. scripts/test.sh tests/unit -x).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$here"
bash scripts/setup.sh
bash scripts/system-deps.sh
export PATH="$here/.venv/bin:$PATH"
# The environment is shared by every clone; its editable install points at the clone that ran
# setup last. PYTHONPATH makes this clone's code win, in this process and every child.
export PYTHONPATH="$here${PYTHONPATH:+:$PYTHONPATH}"
exec python -m pytest -p no:cacheprovider --timeout=1200 --durations=25 "${@:-tests}"
