#!/usr/bin/env bash
# System packages the test suite needs (Debian): Chromium + chromedriver for the dashboard test,
# PostgreSQL for the server/store tests, podman + debootstrap for the payload's container image, Slurm + munge + slurmdbd + MariaDB (accounting) for the Slurm executor's tests. Idempotent: installs only what is missing.
set -euo pipefail
need=()
command -v chromium >/dev/null || need+=(chromium)
command -v chromedriver >/dev/null || need+=(chromium-driver)
ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1 || need+=(postgresql)
# the two-node Slurm test cluster (scripts/slurm-cluster.sh): slurmctld, slurmd, munge, nsenter
[ -x /usr/sbin/slurmctld ] && [ -x /usr/sbin/slurmd ] || need+=(slurm-wlm)
[ -x /usr/sbin/munged ] || need+=(munge)
# its accounting: slurmdbd on a MariaDB the cluster script starts in its own folder (127.0.0.1 only)
[ -x /usr/sbin/slurmdbd ] || need+=(slurmdbd)
[ -x /usr/sbin/mariadbd ] || need+=(mariadb-server)
command -v ip >/dev/null || need+=(iproute2)
# `slurm-cluster.sh cut-home`: compute nodes with no way home (tests/slurm/test_slurm_live.py)
command -v iptables >/dev/null || [ -x /usr/sbin/iptables ] || need+=(iptables)
# the payload's container image (scripts/payload-image.sh, tests/integration/test_container_payload.py):
# podman runs it (crun, conmon come with it; runc where crun refuses hybrid cgroups; catatonit
# for `podman run --init`), debootstrap makes its Debian base
command -v podman >/dev/null || need+=(podman)
[ -x /usr/sbin/runc ] || need+=(runc)
[ -x /usr/libexec/podman/catatonit ] || need+=(catatonit)
[ -x /usr/sbin/debootstrap ] || need+=(debootstrap)
if [ ${#need[@]} -gt 0 ]; then
  echo "[system-deps] installing ${need[*]}" >&2
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
