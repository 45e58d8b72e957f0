#!/usr/bin/env bash
# A real Rucio server on loopback, for gridml's tests and benchmarks (and to try the rucio backend).
#
#   scripts/rucio-server.sh install            # the server's own venv (once; ~1 min)
#   scripts/rucio-server.sh start STATE [PORT] # idempotent: configure, bootstrap, run; prints
#                                              # `export` lines: eval "$(scripts/rucio-server.sh start d)"
#   scripts/rucio-server.sh stop STATE         # stops gunicorn (STATE is kept: restart reuses it)
#   scripts/rucio-server.sh destroy STATE      # stops everything (PostgreSQL too), removes STATE
#   scripts/rucio-server.sh daemons STATE      # judge-evaluator + abacus, --run-once
#   scripts/rucio-server.sh env STATE          # the same `export` lines for a client
#
# The server (PyPI `rucio`, same 41.x as the rucio-clients gridml uses) lives in its own venv under
# $GRIDML_RUCIO_ROOT (default ~/.cache/gridml), named by a hash of this recipe, never in the clone.
# It runs rucio.web.rest.flaskapi.v1.main:application under gunicorn, one single-threaded worker
# (SQLite takes one writer at a time), on 127.0.0.1:PORT (a free port when none is given).
# scripts/rucio/harness.py writes the configs and provisions: see its docstring.
# GRIDML_RUCIO_DB=postgresql (at the first start of a STATE): the database is PostgreSQL instead,
# started with scripts/postgres.sh (its folder outside STATE, which the postgres user may not
# enter), two workers, and Rucio's JSON metadata plugin works (it needs PostgreSQL/MySQL/Oracle).
set -euo pipefail
RUCIO_VERSION=41.5.1
GUNICORN_VERSION=23.0.0
PSYCOPG_VERSION=3.2.10
RECIPE=2   # bump when the install steps change
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
PY="${GRIDML_PYTHON:-$(command -v python3.11 || command -v python3)}"
key="$(printf 'r%s g%s p%s %s %s' "$RUCIO_VERSION" "$GUNICORN_VERSION" "$PSYCOPG_VERSION" "$RECIPE" \
       "$("$PY" -c 'import sys; print(sys.version_info[:2])')" | sha256sum | cut -c1-12)"
venv="${GRIDML_RUCIO_ROOT:-$HOME/.cache/gridml}/rucio-server-$key"
log() { printf '[rucio-server] %s\n' "$*" >&2; }

install() {
  [ -f "$venv/.complete" ] && return 0
  mkdir -p "$(dirname "$venv")"
  exec 9>"$venv.lock"; flock 9   # two test runs at once: one builds, the other waits for it
  [ -f "$venv/.complete" ] && { flock -u 9; return 0; }
  local tmp="$venv.building.$$"
  log "installing rucio==$RUCIO_VERSION server into $venv (first time: ~1 min)"
  rm -rf "$tmp"; mkdir -p "$(dirname "$venv")"
  "$PY" -m venv "$tmp"
  "$tmp/bin/python" -m pip install -q --disable-pip-version-check \
      "rucio==$RUCIO_VERSION" "gunicorn==$GUNICORN_VERSION" "psycopg[binary]==$PSYCOPG_VERSION" \
      >"$tmp.log" 2>&1 || { tail -30 "$tmp.log" >&2; log "pip failed (log: $tmp.log)"; return 1; }
  rm -f "$tmp.log"
  grep -rlI --null "$tmp" "$tmp/bin" | xargs -0 -r sed -i "s#$tmp#$venv#g"
  sed -i "s#$tmp#$venv#g" "$tmp/pyvenv.cfg"
  touch "$tmp/.complete"
  rm -rf "$venv"; mv "$tmp" "$venv"
  flock -u 9
}

free_port() { "$PY" "$here/../gridml/server/ports.py"; }  # below the ephemeral range
port_of() { "$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["port"])' "$1/server.json"; }
pid_alive() { [ -f "$1/gunicorn.pid" ] && kill -0 "$(cat "$1/gunicorn.pid")" 2>/dev/null; }
ping_ok() { curl -sf -m 2 "http://127.0.0.1:$1/ping" >/dev/null 2>&1; }

wait_ping() {  # wait_ping STATE PORT: up to 60 s for /ping
  for _ in $(seq 1 300); do
    ping_ok "$2" && return 0
    pid_alive "$1" || { log "gunicorn died; see $1/logs/gunicorn.log"; tail -20 "$1/logs/gunicorn.log" >&2; return 1; }
    sleep 0.2
  done
  log "no answer on /ping after 60 s; see $1/logs/gunicorn.log"; return 1
}

start() {
  local state; state="$(mkdir -p "$1" && cd "$1" && pwd)"
  install
  local port="${2:-}"
  if [ -n "$port" ] && [ -f "$state/server.json" ] && [ "$port" != "$(port_of "$state")" ]; then
    rm -f "$state/.provisioned"  # another port: rewrite the configs
  fi
  [ -z "$port" ] && [ -f "$state/server.json" ] && port="$(port_of "$state")"
  [ -z "$port" ] && port="$(free_port)"
  if pid_alive "$state" && ping_ok "$port"; then env_lines "$state"; return 0; fi
  local workers=1
  if [ -f "$state/pg.dir" ] || [ "${GRIDML_RUCIO_DB:-sqlite}" = postgresql ]; then
    GRIDML_RUCIO_DB_URL="$(start_pg "$state")"; export GRIDML_RUCIO_DB_URL; workers=2
  fi
  if [ ! -f "$state/.provisioned" ]; then  # a restart reuses configs, database and accounts
    "$venv/bin/python" "$here/rucio/harness.py" setup "$state" "$port"
    touch "$state/.provisioned"
  fi
  RUCIO_CONFIG="$state/server/rucio.cfg" setsid "$venv/bin/gunicorn" \
      --bind "127.0.0.1:$port" --workers "$workers" --threads 1 --timeout 120 \
      --log-file "$state/logs/gunicorn.log" \
      rucio.web.rest.flaskapi.v1.main:application >>"$state/logs/gunicorn.log" 2>&1 </dev/null &
  echo $! >"$state/gunicorn.pid"
  wait_ping "$state" "$port"
  log "Rucio $RUCIO_VERSION answering on http://127.0.0.1:$port (state $state)"
  env_lines "$state"
}

stop() {
  local state="$1" pid
  pid_alive "$state" || { rm -f "$state/gunicorn.pid"; return 0; }
  pid="$(cat "$state/gunicorn.pid")"
  kill -TERM "$pid"
  for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -0 "$pid" 2>/dev/null && kill -KILL "$pid"
  rm -f "$state/gunicorn.pid"
}

start_pg() {  # start_pg STATE -> prints the SQLAlchemy URL of this STATE's Rucio database
  local state="$1" dir port url db
  if [ -f "$state/pg.dir" ]; then dir="$(cat "$state/pg.dir")"; port="$(cat "$dir/port")"
  else dir="/tmp/gridml-rucio-pg-$(printf %s "$state" | sha256sum | cut -c1-10)"; port="$(free_port)"
       echo "$dir" >"$state/pg.dir"; fi
  url="$(bash "$here/postgres.sh" start "$dir" "$port")"   # postgresql://gridml@127.0.0.1:PORT/gridml
  db=rucio
  psql "$url" -qtAc "SELECT 1 FROM pg_database WHERE datname='$db'" | grep -q 1 \
    || psql "$url" -qc "CREATE DATABASE $db OWNER gridml" >&2
  echo "postgresql+psycopg://gridml@127.0.0.1:$port/$db"
}

destroy() {
  local state="$1"
  [ -d "$state" ] || return 0
  stop "$state"
  if [ -f "$state/pg.dir" ]; then
    local dir; dir="$(cat "$state/pg.dir")"
    bash "$here/postgres.sh" stop "$dir" >/dev/null 2>&1 || true
    rm -rf "$dir"
  fi
  rm -rf "$state"
}

daemons() {  # bring rule/replica state and account usage up to date, then return
  local state; state="$(cd "$1" && pwd)"
  RUCIO_CONFIG="$state/server/rucio.cfg" "$venv/bin/python" "$here/rucio/harness.py" daemons "$state" \
      >>"$state/logs/daemons.log" 2>&1
}

env_lines() {  # eval "$(scripts/rucio-server.sh start DIR)" sets them in a shell
  echo "export RUCIO_CONFIG=$1/client/rucio.cfg"
  echo "export RUCIO_ACCOUNT=jdoe"
  echo "export GRIDML_RUCIO_RSE=TEST_USERDISK"
  echo "# Rucio at http://127.0.0.1:$(port_of "$1")"
}

case "${1:-}" in
  install) install; echo "$venv" ;;
  start) start "${2:?STATE folder}" "${3:-}" ;;
  stop) stop "${2:?STATE folder}" ;;
  daemons) daemons "${2:?STATE folder}" ;;
  destroy) destroy "${2:?STATE folder}" ;;
  env) env_lines "$(cd "${2:?STATE folder}" && pwd)" ;;
  venv) echo "$venv" ;;
  *) sed -n '2,19p' "$0"; exit 2 ;;
esac
