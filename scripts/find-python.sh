#!/usr/bin/env bash
# Print the path of a working Python X.Y interpreter on this machine (one that runs, is X.Y and can
# make a venv), or say on stderr why there is none and exit 1. Looks at pythonX.Y on PATH, then
# pyenv's (`pyenv prefix X.Y`, $PYENV_ROOT/versions/X.Y.*), then /usr/local/bin and /usr/bin.
# A pyenv shim of a version that is not the selected one fails when run: it is skipped.
# Usage: scripts/find-python.sh 3.13
set -uo pipefail
v="${1:?usage: find-python.sh X.Y}"
cands=("$(command -v "python$v" 2>/dev/null || true)")
if command -v pyenv >/dev/null 2>&1; then
  for p in $(pyenv prefix "$v" 2>/dev/null | tr ':' ' '); do cands+=("$p/bin/python$v"); done
fi
pyroot="${PYENV_ROOT:-$HOME/.pyenv}"
while IFS= read -r d; do cands+=("$d/bin/python$v"); done < <(ls -d "$pyroot"/versions/"$v".* 2>/dev/null | sort -rV)
cands+=("/usr/local/bin/python$v" "/usr/bin/python$v")
for c in "${cands[@]}"; do
  [ -n "$c" ] && [ -x "$c" ] || continue
  if "$c" -c "import sys, venv, ensurepip; assert '%d.%d' % sys.version_info[:2] == '$v'" >/dev/null 2>&1; then
    echo "$c"; exit 0
  fi
done
echo "no working Python $v on this machine (looked at python$v on PATH, pyenv's versions, /usr/local/bin, /usr/bin)" >&2
exit 1
