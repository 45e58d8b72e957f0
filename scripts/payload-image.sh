#!/usr/bin/env bash
# Build (once) the payload's container images with podman from Debian's package archive alone:
# no container registry is needed (docs/containers.md).
#
#   scripts/payload-image.sh [base]   Debian bookworm (minbase) + python3 (3.11, the project's
#                                     Python) + python3-venv, made with debootstrap and imported
#                                     with `podman import`: localhost/gridml-payload-base:<key>.
#                                     It runs the payload with the project's environment mounted
#                                     read-only (payload.python + resources.container).
#   scripts/payload-image.sh torch    containers/Containerfile FROM that base, the payload and
#   scripts/payload-image.sh keras    its framework installed inside from the package index
#                                     (pip's own configuration and /opt/wheels are mounted into
#                                     the build when present): localhost/gridml-payload:<fw>-<key>.
#
# Cached, keyed by a hash of the recipe: the image stays in podman's storage (reused in seconds)
# and the base's root filesystem as a tar under $GRIDML_IMAGE_CACHE (default
# ~/.cache/gridml/images), so a wiped podman storage re-imports it without debootstrap.
# Prints the image's name as its last line on stdout; progress goes to stderr.
# Exit 3: podman or debootstrap missing (scripts/system-deps.sh installs them); exit 4: podman
# cannot start a container on this machine (its last error line on stderr).
# GRIDML_DEBIAN_MIRROR: the Debian archive to bootstrap from (default: this machine's apt source).
set -euo pipefail
RECIPE=1   # bump when the base's build steps below change
SUITE=bookworm
PACKAGES=python3,python3-venv,python-is-python3,ca-certificates
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
what="${1:-base}"
log() { printf '[payload-image] %s\n' "$*" >&2; }
SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
for tool in podman debootstrap; do
  command -v "$tool" >/dev/null || [ -x "/usr/sbin/$tool" ] || {
    log "$tool is not installed: run scripts/system-deps.sh"; exit 3; }
done
PATH="$PATH:/usr/sbin"

base_key="$( { echo "recipe=$RECIPE suite=$SUITE packages=$PACKAGES"; uname -m; } | sha256sum | cut -c1-12)"
base="localhost/gridml-payload-base:$base_key"
cache="${GRIDML_IMAGE_CACHE:-$HOME/.cache/gridml/images}"
mkdir -p "$cache"
exec 9>"$cache/.lock"
flock 9   # one build at a time; a second caller waits and then reuses the image

mirror() {
  if [ -n "${GRIDML_DEBIAN_MIRROR:-}" ]; then echo "$GRIDML_DEBIAN_MIRROR"; return; fi
  # the first "URIs:" of apt's deb822 Debian source (not the security one), if any
  sed -n 's/^URIs:[[:space:]]*\([^[:space:]]*\).*/\1/p' /etc/apt/sources.list.d/debian.sources \
    2>/dev/null | grep -v security | head -n 1 || true
}

build_base() {
  local tar="$cache/base-$base_key.tar"
  if [ ! -s "$tar" ]; then
    local root; root="$(mktemp -d "$cache/rootfs.XXXXXX")"
    trap '$SUDO rm -rf "$root"' EXIT
    log "debootstrap $SUITE (minbase + $PACKAGES) into $root (first time: minutes)"
    local start=$SECONDS
    mkdir -p "$cache/debs"   # the downloaded packages, kept: a recipe change downloads only what is new
    $SUDO debootstrap --variant=minbase --include="$PACKAGES" --cache-dir="$cache/debs" "$SUITE" "$root" \
      $(mirror) >&2 \
      || { log "debootstrap failed (is Debian's archive reachable? apt-get update works?)"; exit 1; }
    # what an image does not need: package lists, downloaded .debs, docs and man pages
    $SUDO rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/* \
      "$root"/usr/share/doc "$root"/usr/share/man "$root"/usr/share/locale
    $SUDO tar -C "$root" --numeric-owner -cf "$tar.tmp" .
    $SUDO chown "$(id -u):$(id -g)" "$tar.tmp"
    mv "$tar.tmp" "$tar"
    $SUDO rm -rf "$root"; trap - EXIT
    log "root filesystem: $(du -h "$tar" | cut -f1) in $((SECONDS - start)) s"
  fi
  log "podman import $tar as $base"
  podman import --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV PYTHONUNBUFFERED=1' --change 'CMD ["python3"]' \
    --message "gridml payload base: Debian $SUITE minbase + $PACKAGES (scripts/payload-image.sh)" \
    "$tar" "$base" >/dev/null
}

# Can podman start a container here with its defaults? Where root lacks CAP_SYS_RESOURCE (VMs,
# CI sandboxes) podman's default limits (1048576 open files) are refused ("setrlimit
# RLIMIT_NOFILE: Operation not permitted"), and crun refuses cgroup v1 with controllers on the
# v2 hierarchy ("cgroups in hybrid mode not supported"): then a containers.conf with this
# machine's own limits (and runc) is written and named on stdout as CONTAINERS_CONF=<path>;
# export it (podman reads it instead of its defaults); the builds below use it.
check_podman() {
  local conf="$cache/containers.conf" err limits=() runtime="" nproc nofile
  if [ -s "$conf" ] && CONTAINERS_CONF="$conf" podman run --rm --network=host "$base" true >/dev/null 2>&1; then
    export CONTAINERS_CONF="$conf"; echo "CONTAINERS_CONF=$conf"; return 0   # needed before, and works
  fi
  err="$(podman run --rm --network=host "$base" true 2>&1 >/dev/null)" && { rm -f "$conf"; return 0; }
  for _ in 1 2 3; do
    case "$err" in
      *rlimit*|*RLIMIT*)
        nofile="$(ulimit -Sn):$(ulimit -Hn)"
        nproc="$(ulimit -Hu)"; [ "$nproc" = unlimited ] && nproc=$(cat /proc/sys/kernel/pid_max)
        [ "$nproc" -gt "$(cat /proc/sys/kernel/pid_max)" ] && nproc=$(cat /proc/sys/kernel/pid_max)
        limits=("nofile=$nofile" "nproc=$nproc:$nproc");;
      *"hybrid mode not supported"*)
        command -v runc >/dev/null || [ -x /usr/sbin/runc ] || {
          log "crun refuses this machine's cgroups (hybrid v1/v2) and runc is not installed: run scripts/system-deps.sh"
          return 1; }
        runtime=runc;;
      *) break;;
    esac
    { echo "# written by scripts/payload-image.sh: podman's defaults cannot start a container here"
      echo "[containers]"
      [ ${#limits[@]} -gt 0 ] && printf 'default_ulimits = ["%s", "%s"]\n' "${limits[@]}"
      echo "[engine]"
      [ -n "$runtime" ] && echo "runtime = \"$runtime\""
    } > "$conf"
    err="$(CONTAINERS_CONF="$conf" podman run --rm --network=host "$base" true 2>&1 >/dev/null)" && {
      log "podman needs $conf here (${limits[*]} ${runtime:+runtime $runtime}): export CONTAINERS_CONF=$conf"
      export CONTAINERS_CONF="$conf"; echo "CONTAINERS_CONF=$conf"; return 0; }
  done
  log "podman cannot start a container here: $(printf '%s' "$err" | tail -n 1)"
  return 1
}

if podman image exists "$base"; then log "reusing $base"; else build_base; fi
check_podman || exit 4
if [ "$what" = base ]; then
  echo "$base"; exit 0
fi
case "$what" in torch|keras) ;; *) log "usage: $0 [base|torch|keras]"; exit 2;; esac

# the framework's image: the Containerfile from the base, keyed by everything it copies
key="$( { echo "$base"; cd "$here" && find containers/Containerfile pyproject.toml README.md \
  requirements gridml payloads -type f ! -name '*.pyc' -print0 | sort -z | xargs -0 sha256sum; } \
  | sha256sum | cut -c1-12)"
image="localhost/gridml-payload:$what-$key"
if podman image exists "$image"; then log "reusing $image"; echo "$image"; exit 0; fi
mounts=() mounted=()
mount_ro() {  # $1 at its own path, read-only, unless inside one mounted already
  local m; for m in "${mounted[@]}"; do case "$1/" in "$m"/*) return;; esac; done
  mounted+=("$1"); mounts+=(--volume "$1:$1:ro")
}
for conf in /etc/pip.conf /etc/xdg/pip; do [ -e "$conf" ] && mount_ro "$conf"; done
# what pip's configuration names here (find-links, file:// indexes, its CA bundle: a proxy's
# certificate may be in it), at their own paths
for loc in $( { python3 -m pip config list 2>/dev/null | sed -n "s/^[^=]*='\(.*\)'\$/\1/p"; \
                echo "${PIP_FIND_LINKS:-} ${PIP_CERT:-}"; } | tr ' ' '\n' \
              | sed -n 's#^file://##p; \#^/#p' | sed 's#/simple/*$##' | sort -u); do
  [ -e "$loc" ] && mount_ro "$loc"
done
pass=()
for name in $(compgen -e | grep '^PIP_' || true); do pass+=(--build-arg "$name=${!name}"); done
log "podman build $image (FRAMEWORK=$what from $base; installs from the package index: minutes)"
start=$SECONDS
podman build --network=host "${mounts[@]}" "${pass[@]}" --build-arg BASE="$base" \
  --build-arg FRAMEWORK="$what" -f "$here/containers/Containerfile" -t "$image" "$here" >&2
log "built $image in $((SECONDS - start)) s"
echo "$image"
