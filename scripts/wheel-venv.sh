#!/usr/bin/env bash
# Build gridml's wheel from this clone and install it, its dependencies RESOLVED by pip, into a
# fresh venv with numpy >= 2: a user's `pip install gridml`, apart from the development
# environment. Prints the venv's path on stdout (the wheel's path is in it as .wheel).
#
# The venv lives outside the clone, under $GRIDML_ENV_ROOT (default ~/.cache/gridml/envs), named
# by a hash of the wheel's dependency list (its METADATA Requires-Dist), the Python and this
# recipe: reruns with the same dependencies only reinstall the wheel itself (seconds); a changed
# dependency resolves a new venv (minutes). Exit 3: no package index reachable (nothing to
# resolve from).
# Usage: scripts/wheel-venv.sh [PYTHON]       # default python3.11 (or $GRIDML_WHEEL_PYTHON)
set -euo pipefail
RECIPE=1
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${1:-${GRIDML_WHEEL_PYTHON:-$(command -v python3.11 || command -v python3)}}"
root="${GRIDML_ENV_ROOT:-$HOME/.cache/gridml/envs}"
log() { printf '[wheel] %s\n' "$*" >&2; }
mkdir -p "$root"
work="$(mktemp -d "${TMPDIR:-/tmp}/gridml-wheel.XXXXXX")"
trap 'rm -rf "$work"' EXIT
# the clone's files as git sees them (tracked and new, not ignored): no stale build/ folder
(cd "$here" && git ls-files -z -co --exclude-standard | xargs -0 -I{} sh -c '[ -e "$1" ] && printf "%s\0" "$1"' _ {} \
  | tar --null -T - -cf - ) | tar -xf - -C "$work" --one-top-level=src
t0=$(date +%s)
if ! "$PY" -m pip wheel -q --no-deps "$work/src" -w "$work/dist" >"$work/build.log" 2>&1; then
  if grep -qiE "No matching distribution|Could not find a version|Failed to establish|Network is unreachable" "$work/build.log"; then
    log "no package index reachable to fetch the build requirements"; cat "$work/build.log" >&2; exit 3
  fi
  cat "$work/build.log" >&2; exit 1
fi
whl="$(ls "$work"/dist/gridml-*.whl)"
log "built $(basename "$whl") ($(du -k "$whl" | cut -f1) KiB) in $(( $(date +%s) - t0 )) s"
deps="$("$PY" - "$whl" <<'PY'
import sys, zipfile
z = zipfile.ZipFile(sys.argv[1])
meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
print("\n".join(sorted(l for l in z.read(meta).decode().splitlines() if l.startswith("Requires-Dist:"))))
PY
)"
key="$( { echo "recipe=$RECIPE"; "$PY" -c 'import sys; print(sys.version)'; echo "$deps"; } | sha256sum | cut -c1-16)"
venv="$root/wheel-$key"
exec 9>"$root/.lock-wheel-$key"
flock 9
t0=$(date +%s)
if [ ! -f "$venv/.complete" ]; then
  rm -rf "$venv"
  log "resolving the wheel's dependencies into a fresh venv $venv (minutes)"
  "$PY" -m venv "$venv"
  if ! "$venv/bin/python" -m pip install -q "$whl" "numpy>=2" >"$work/install.log" 2>&1; then
    cat "$work/install.log" >&2; rm -rf "$venv"; exit 1
  fi
  touch "$venv/.complete"
else  # the same dependency list was resolved before: only the wheel changes
  "$venv/bin/python" -m pip install -q --no-deps --force-reinstall "$whl" >&2
fi
mkdir -p "$venv/.wheel" && rm -f "$venv"/.wheel/*.whl && cp "$whl" "$venv/.wheel/"
log "installed into $venv in $(( $(date +%s) - t0 )) s"
echo "$venv"
