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
# Exit 4: PYTHON given as X.Y and no working interpreter of it here (scripts/find-python.sh).
# Usage: scripts/wheel-venv.sh [PYTHON | X.Y]   # default python3.11 (or $GRIDML_WHEEL_PYTHON)
#   GRIDML_WHEEL=path.whl        install this wheel instead of building one (one build, many Pythons)
#   GRIDML_WHEEL_TORCH=auto      add the [torch] extra where a CPU torch wheel resolves for this
#                                Python (a torch without nvidia-* requirements); the run's venv then
#                                gets a torchrun and .payload says "torch" (else why not)
set -euo pipefail
RECIPE=1   # bump when the steps below change
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${1:-${GRIDML_WHEEL_PYTHON:-$(command -v python3.11 || command -v python3)}}"
if [[ "$PY" =~ ^[0-9]+\.[0-9]+$ ]]; then
  PY="$(bash "$here/scripts/find-python.sh" "$PY")" || exit 4
fi
root="${GRIDML_ENV_ROOT:-$HOME/.cache/gridml/envs}"
log() { printf '[wheel] %s\n' "$*" >&2; }
mkdir -p "$root"
work="$(mktemp -d "${TMPDIR:-/tmp}/gridml-wheel.XXXXXX")"
trap 'rm -rf "$work"' EXIT
# the clone's files as git sees them (tracked and new, not ignored): no stale build/ folder
(cd "$here" && git ls-files -z -co --exclude-standard | xargs -0 -I{} sh -c '[ -e "$1" ] && printf "%s\0" "$1"' _ {} \
  | tar --null -T - -cf - ) | tar -xf - -C "$work" --one-top-level=src
t0=$(date +%s)
if [ -n "${GRIDML_WHEEL:-}" ]; then
  mkdir -p "$work/dist" && cp "$GRIDML_WHEEL" "$work/dist/"
elif ! "$PY" -m pip wheel -q --no-deps "$work/src" -w "$work/dist" >"$work/build.log" 2>&1; then
  if grep -qiE "No matching distribution|Could not find a version|Failed to establish|Network is unreachable" "$work/build.log"; then
    log "no package index reachable to fetch the build requirements"; cat "$work/build.log" >&2; exit 3
  fi
  cat "$work/build.log" >&2; exit 1
fi
whl="$(ls "$work"/dist/gridml-*.whl)"
[ -n "${GRIDML_WHEEL:-}" ] || log "built $(basename "$whl") ($(du -k "$whl" | cut -f1) KiB) in $(( $(date +%s) - t0 )) s"
deps="$("$PY" - "$whl" <<'PY'
import sys, zipfile
z = zipfile.ZipFile(sys.argv[1])
meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
print("\n".join(sorted(l for l in z.read(meta).decode().splitlines() if l.startswith("Requires-Dist:"))))
PY
)"
torch_mode="${GRIDML_WHEEL_TORCH:-}"
key="$( { echo "recipe=$RECIPE"; "$PY" -c 'import sys; print(sys.version)'; echo "$deps"
          [ -z "$torch_mode" ] || echo "torch=$torch_mode"; } | sha256sum | cut -c1-16)"
venv="$root/wheel-$key"
exec 9>"$root/.lock-wheel-$key"
flock 9
t0=$(date +%s)
if [ ! -f "$venv/.complete" ]; then
  rm -rf "$venv"
  log "resolving the wheel's dependencies into a fresh venv $venv (minutes)"
  "$PY" -m venv "$venv"
  target="$whl"; payload="elsewhere: the wheel without extras"
  if [ "$torch_mode" = auto ]; then
    # which torch the [torch] extra would bring for this Python (metadata only, nothing downloaded)
    treq="$(printf '%s\n' "$deps" | sed -n 's/^Requires-Dist: \(torch[^;]*\);.*extra == "torch".*/\1/p' | head -1)"
    if "$venv/bin/python" -m pip install -q --dry-run --ignore-installed --no-deps --only-binary=:all: \
         --report "$work/torch.json" "${treq:-torch}" >"$work/torch.log" 2>&1; then
      payload="$("$venv/bin/python" - "$work/torch.json" <<'PY'
import json, sys
item = json.load(open(sys.argv[1]))["install"][0]
name = item["download_info"]["url"].rsplit("/", 1)[-1]
gpu = [r for r in item["metadata"].get("requires_dist") or [] if r.startswith("nvidia-")]
print(f"elsewhere: the torch that resolves for this Python ({name}) is a CUDA build (nvidia-* requirements)"
      if gpu else f"torch: {name}")
PY
)"
    else
      payload="elsewhere: no torch wheel resolves for this Python ($(tail -1 "$work/torch.log"))"
    fi
    [[ "$payload" == torch:* ]] && target="$whl[torch]"
    log "payload: $payload"
  fi
  if ! "$venv/bin/python" -m pip install -q "$target" "numpy>=2" >"$work/install.log" 2>&1; then
    cat "$work/install.log" >&2; rm -rf "$venv"
    if grep -qiE "No matching distribution|Could not find a version|Failed to establish|Network is unreachable" "$work/install.log"; then
      log "no package index reachable to resolve the wheel's dependencies"; exit 3
    fi
    exit 1
  fi
  echo "$payload" > "$venv/.payload"
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
cp "$venv/.payload" "$run/.payload" 2>/dev/null || echo "elsewhere: the wheel without extras" > "$run/.payload"
if [ -x "$venv/bin/torchrun" ]; then   # the payload runs here: its launcher next to this interpreter
  printf '#!/bin/sh\nexec "$(dirname "$0")/python" -m torch.distributed.run "$@"\n' > "$run/bin/torchrun"
  chmod +x "$run/bin/torchrun"
fi
log "installed $(basename "$whl") into $run (over $venv) in $(( $(date +%s) - t0 )) s"
echo "$run"
