#!/usr/bin/env bash
# README command 1: set up (idempotent), make and register the sample data, run the quickstart.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$here"
bash scripts/setup.sh
export PATH="$here/.venv/bin:$PATH"
# The environment is shared by every clone; its editable install points at the clone that ran
# setup last. PYTHONPATH makes this clone's code win, in this process and every child.
export PYTHONPATH="$here${PYTHONPATH:+:$PYTHONPATH}"
data="${GRIDML_HOME:-$HOME/.gridml}/sample-data"
if ! gridml data ls user.demo:quickstart.train >/dev/null 2>&1; then
  echo "[quickstart] making the sample data in $data"
  gridml demo-data --out "$data"   # writes and registers user.demo:quickstart.train/.val
fi
gridml validate examples/quickstart.yaml
time gridml submit examples/quickstart.yaml "$@"
