"""pytest fixtures for the real Rucio server. Load them with (in a conftest.py):

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "rucio"))  # tests/rucio
    pytest_plugins = ["rucio_fixtures"]       # root conftest; or: from rucio_fixtures import *

Fixtures:
  rucio_server  (session)  a started server (RucioServer: .url .env .info .stop() .start()
                           .daemons() .start_seconds); stopped and removed after the session
  rucio_env     (function) sets RUCIO_CONFIG, RUCIO_ACCOUNT, GRIDML_RUCIO_RSE for the test
  rucio_store   (function) a gridml RucioStore on that server; .test_scope = the writable scope
Tests using them should carry @pytest.mark.service (and slow).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from rucio_harness import RucioServer, install_seconds, remove_server, start_server


@pytest.fixture(scope="session")
def rucio_server() -> Iterator[RucioServer]:
    # Its own folder, not pytest's basetemp: pytest prunes old basetemps, and with several pytest
    # runs on one machine a long session's basetemp can vanish under a running server.
    t0 = time.perf_counter()
    installed = install_seconds()
    server = start_server()
    print(f"\n[rucio] install {installed:.1f} s, start {server.start_seconds:.1f} s, "
          f"total {time.perf_counter() - t0:.1f} s ({server.url})")
    try:
        yield server
    finally:
        remove_server(server)


@pytest.fixture
def rucio_env(rucio_server: RucioServer, monkeypatch: pytest.MonkeyPatch) -> RucioServer:
    for key, value in rucio_server.env.items():
        monkeypatch.setenv(key, value)
    return rucio_server


@pytest.fixture
def rucio_store(rucio_env: RucioServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    from gridml.data.rucio import RucioStore

    monkeypatch.setenv("GRIDML_HOME", str(tmp_path / "gridml-home"))
    store = RucioStore()
    store.test_scope = rucio_env.info["scope"]  # type: ignore[attr-defined]
    return store
