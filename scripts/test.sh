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
# This clone's bytecode, compiled once up front: where PYTHONDONTWRITEBYTECODE is set (as on this
# kind of machine) no process writes it, and each of the suite's ~1,600 gridml, server and payload
# processes compiled the project's modules it imports from source again (0.1-0.35 s of CPU each).
python -m compileall -q -j 0 gridml payloads examples >/dev/null
# One throwaway PostgreSQL for the whole run, on a free port in a folder of its own (so two runs
# on one machine never share or stop each other's); the store/API/server tests use it.
if [ -z "${GRIDML_TEST_PG_URL:-}" ] && [ "${GRIDML_TEST_PG:-1}" != 0 ]; then
  pgdir="$(mktemp -d /tmp/gridml-test-pg.XXXXXX)"
  pgport="$(python gridml/server/ports.py)"  # below the ephemeral range: no client takes it first
  GRIDML_TEST_PG_URL="$(bash scripts/postgres.sh start "$pgdir" "$pgport")"
  export GRIDML_TEST_PG_URL
  trap 'bash scripts/postgres.sh stop "$pgdir" >/dev/null 2>&1; rm -rf "$pgdir"' EXIT
fi
# gridml as a user installs it: the wheel, its dependencies resolved into a fresh venv with numpy 2
# (cached outside the clone by the wheel's dependency list); tests/integration/test_wheel_install.py
# runs init, validate and a torch campaign from it with the payload in this environment.
if [ -z "${GRIDML_WHEEL_VENV:-}" ]; then
  rc=0; wheel_venv="$(bash scripts/wheel-venv.sh)" || rc=$?
  if [ "$rc" = 0 ]; then export GRIDML_WHEEL_VENV="$wheel_venv"
  elif [ "$rc" != 3 ] || [ -n "${CI:-}" ]; then echo "[test] building/installing the wheel failed" >&2; exit 1
  fi  # 3: no package index reachable here; the test says so (and fails under CI)
fi
# The same under each newer Python this machine has (scripts/find-python.sh; pyenv's included),
# the wheel built above reused, [torch] where a CPU torch wheel resolves for that Python:
# GRIDML_WHEEL_VENVS="3.12=/venv 3.13=/venv". A Python not here is left out (the test skips it).
if [ -z "${GRIDML_WHEEL_VENVS:-}" ] && [ -n "${GRIDML_WHEEL_VENV:-}" ]; then
  wheel_venvs=""
  for v in 3.12 3.13; do
    rc=0; wheel_venv="$(GRIDML_WHEEL="$(ls "$GRIDML_WHEEL_VENV"/.wheel/gridml-*.whl)" GRIDML_WHEEL_TORCH=auto \
      bash scripts/wheel-venv.sh "$v")" || rc=$?
    if [ "$rc" = 0 ]; then wheel_venvs="$wheel_venvs $v=$wheel_venv"
    elif [ "$rc" = 4 ]; then echo "[test] no Python $v here: its wheel test is skipped" >&2
    elif [ "$rc" != 3 ] || [ -n "${CI:-}" ]; then echo "[test] the wheel under Python $v failed" >&2; exit 1
    fi
  done
  export GRIDML_WHEEL_VENVS="${wheel_venvs# }"
fi
# The docs site: broken links and missing pages fail (mkdocs.yml).
echo "[test] mkdocs build --strict" >&2
NO_MKDOCS_2_WARNING=1 mkdocs build --strict --quiet --site-dir "$(mktemp -d /tmp/gridml-site.XXXXXX)"
# The house stays straight: lint, types, and the layer contracts (pyproject.toml), before any test.
echo "[test] ruff, mypy, import-linter" >&2
ruff check gridml payloads tests benchmarks scripts examples
# mypy's cache outside the clone, like the environment: a fresh clone's check took 52 s here, 1.7 s
# from the cache another clone left (mypy re-checks every file whose content differs)
MYPY_CACHE_DIR="${MYPY_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/gridml/mypy}" mypy
lint-imports --no-cache
# Two workers (pytest-xdist; GRIDML_TEST_WORKERS=0 runs in one process), a whole test module at a
# time (its fixtures built once), in the suite's folder order, the longest module of a folder first
# (tests/xdist_modules.py, hooked in by tests/conftest.py for --dist loadfile).
workers="${GRIDML_TEST_WORKERS:-2}"
parallel=(); [ "$workers" != 0 ] && parallel=(-n "$workers" --dist loadfile)
python -m pytest -p no:cacheprovider --timeout=1200 --durations=40 "${parallel[@]}" "${@:-tests}"
