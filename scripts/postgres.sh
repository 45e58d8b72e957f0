#!/usr/bin/env bash
# A throwaway PostgreSQL server on a loopback port, for gridml's tests and benchmarks.
#
#   scripts/postgres.sh start [DIR] [PORT]   # prints the URL: postgresql://gridml@127.0.0.1:PORT/gridml
#   scripts/postgres.sh stop  [DIR]
#   scripts/postgres.sh url   [DIR]
#   scripts/postgres.sh status [DIR]        # exit 0 if it runs
#
# DIR defaults to ${GRIDML_PG_DIR:-/tmp/gridml-pg}, PORT to ${GRIDML_PG_PORT:-55432}. Installs
# Debian's postgresql package if initdb is missing. Listens on 127.0.0.1 only, trust auth (a test
# server: never use this for data you keep), synchronous_commit=off (a crash of the machine may
# lose the last few hundred ms of commits, never corrupt the database). Idempotent: `start` on a
# running server just prints its URL.
set -euo pipefail
cmd="${1:-start}"
dir="${2:-${GRIDML_PG_DIR:-/tmp/gridml-pg}}"
port="${3:-${GRIDML_PG_PORT:-55432}}"
log() { printf '[postgres] %s\n' "$*" >&2; }

bindir() {
  local found
  found="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1 || true)"
  if [ -z "$found" ]; then
    log "installing postgresql (apt-get)"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q postgresql >&2
    found="$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)"
  fi
  echo "$found"
}

# PostgreSQL refuses to run as root: run it as the `postgres` system user then.
as_pg() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }

url() { echo "postgresql://gridml@127.0.0.1:$(cat "$dir/port")/gridml"; }

start() {
  local bin; bin="$(bindir)"
  mkdir -p "$dir"
  [ "$(id -u)" = 0 ] && chown postgres:postgres "$dir"
  if [ ! -f "$dir/data/PG_VERSION" ]; then
    log "initdb in $dir/data"
    as_pg "$bin/initdb" -D "$dir/data" -U postgres --auth=trust -E UTF8 >/dev/null
  fi
  echo "$port" | as_pg tee "$dir/port" >/dev/null
  if ! as_pg "$bin/pg_ctl" -D "$dir/data" status >/dev/null 2>&1; then
    as_pg "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 start \
      -o "-c listen_addresses=127.0.0.1 -p $port -k $dir -c synchronous_commit=off \
          -c max_connections=200 -c shared_buffers=128MB" >/dev/null
  fi
  if ! as_pg "$bin/psql" -h 127.0.0.1 -p "$port" -U postgres -tAc \
       "SELECT 1 FROM pg_roles WHERE rolname='gridml'" | grep -q 1; then
    as_pg "$bin/psql" -h 127.0.0.1 -p "$port" -U postgres -qc "CREATE ROLE gridml LOGIN SUPERUSER"
    as_pg "$bin/psql" -h 127.0.0.1 -p "$port" -U postgres -qc "CREATE DATABASE gridml OWNER gridml"
  fi
  url
}

stop() {
  local bin; bin="$(bindir)"
  [ -f "$dir/data/PG_VERSION" ] || return 0
  as_pg "$bin/pg_ctl" -D "$dir/data" -m fast -w stop >/dev/null 2>&1 || true
  log "stopped ($dir)"
}

status() {
  local bin; bin="$(bindir)"
  [ -f "$dir/data/PG_VERSION" ] && as_pg "$bin/pg_ctl" -D "$dir/data" status >/dev/null 2>&1
}

case "$cmd" in
  start) start ;;
  status) status ;;
  stop) stop ;;
  url) url ;;
  *) echo "usage: $0 start|stop|status|url [DIR] [PORT]" >&2; exit 2 ;;
esac
