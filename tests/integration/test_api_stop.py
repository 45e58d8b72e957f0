"""POST /api/v1/studies/{study}/stop over real HTTP (uvicorn on loopback, SQLite), as
`gridml --server URL stop` sends it: the study token only, trials become stopping (a queued one
stopped), the study stopping; should-stop then says stop; an ended trial is a 409."""

from __future__ import annotations

import pytest

from gridml.client import ApiClient
from gridml.errors import ConflictError, StoreError
from gridml.store import open_store
from gridml.store.stopping import GRACEFUL, NOW
from tests.helpers import gridml

pytestmark = pytest.mark.service

SPEC = {"name": "stop", "search": {
    "algorithm": "random", "objective": "val_loss", "direction": "minimize", "seed": 3,
    "space": {"units": {"type": "int", "low": 8, "high": 64}}}}


def test_stop_over_the_api(tmp_path) -> None:
    from gridml.server.embedded import EmbeddedServer

    db = f"sqlite:///{tmp_path / 'g.db'}"
    with EmbeddedServer(db) as srv:
        assert srv.url is not None
        owner = ApiClient(srv.url, retries=0)
        study = owner.create_study("api-stop", SPEC)
        other = ApiClient(srv.url, retries=0)
        other.create_study("other", SPEC)
        ids = [owner.enqueue_trial("api-stop", {"units": u})["id"] for u in (8, 9, 10)]
        store = open_store(db)
        try:
            for tid in ids[:2]:
                store.update_trial(tid, state="running")
            # the CLI with --server: one trial, gracefully
            out = gridml("--server", srv.url, "--token", study["token"], "stop", "api-stop",
                         "--trial", "0").stdout
            assert "1 running trial(s) asked to stop" in out, out
            assert store.get_trial(ids[0]).state == "stopping"
            assert store.get_trial(ids[0]).error == GRACEFUL
            assert store.get_trial(ids[1]).state == "running"
            assert store.get_study("api-stop").state == "running"  # one trial only
            assert owner.should_stop(ids[0]) == (True, GRACEFUL)
            assert owner.should_stop(ids[1])[0] is False
            # another study's token may not stop this one; no token at all neither
            with pytest.raises(StoreError, match="needs its study token"):
                other.stop("api-stop")
            with pytest.raises(StoreError, match="missing bearer token"):
                ApiClient(srv.url, retries=0).stop("api-stop")
            # the whole study, now
            doc = owner.stop("api-stop", now=True)
            assert doc["state"] == "stopping" and doc["now"] is True
            assert {t["number"]: t["state"] for t in doc["trials"]} == \
                {0: "stopping", 1: "stopping", 2: "stopped"}
            assert store.get_trial(ids[1]).error == NOW and store.get_trial(ids[0]).error == NOW
            # an ended trial: nothing to stop (409, one line)
            with pytest.raises(ConflictError, match="trial 2 is stopped: nothing to stop"):
                owner.stop("api-stop", trial=2)
        finally:
            store.close()
            owner.close()
            other.close()
