#!/usr/bin/env bash
# Build gridml's wheel from this clone and install it, its dependencies RESOLVED by pip, into a
# fresh venv with numpy >= 2: a user's `pip install gridml`, apart from the development
# environment. Prints the venv's path on stdout (the wheel's path is in it as .wheel).
#
# The venv lives outside the clone, under $GRIDML_ENV_ROOT (default ~/.cache/gridml/envs), named
# by a hash of the wheel's dependency list (its METADATA Requires-Dist), the Python and this
# recipe: a changed dependency resolves a new venv (minutes); reruns with the same dependencies
# install only the wheel, into a small venv of the run's own layered over it (seconds). Exit 3: no package index reachable (nothing to
# resolve from).
# Usage: scripts/wheel-venv.sh [PYTHON]       # default python3.11 (or $GRIDML_WHEEL_PYTHON)
set -euo pipefail
RECIPE=1   # bump when the steps below change
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
  log "resolved and installed in $(( $(date +%s) - t0 )) s"
fi
flock -u 9
# This run's own venv: this wheel only, over the resolved dependencies (a .pth line after its own
# site-packages), so that runs from other clones or at the same time never swap gridml under it.
runs="$root/wheel-runs"; mkdir -p "$runs"
find "$runs" -mindepth 1 -maxdepth 1 -mmin +720 -exec rm -rf {} + 2>/dev/null || true
run="$(mktemp -d "$runs/run.XXXXXX")"
"$PY" -m venv --without-pip "$run"
site() { "$1" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])'; }
"$venv/bin/python" -m pip --python "$run/bin/python" install -q --no-deps --ignore-installed "$whl" >&2
site "$venv/bin/python" > "$(site "$run/bin/python")/zz-gridml-wheel-deps.pth"   # after: pip must not see the old gridml
mkdir -p "$run/.wheel" && cp "$whl" "$run/.wheel/"
log "installed $(basename "$whl") into $run (over $venv) in $(( $(date +%s) - t0 )) s"
echo "$run"
