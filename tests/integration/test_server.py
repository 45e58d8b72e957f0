"""`gridml serve` as its own process: workers, restart after kill -9, nothing lost."""

from __future__ import annotations

import pytest

from gridml.client import ApiClient
from gridml.server.process import ServerProcess
from gridml.store import EpochReport

pytestmark = pytest.mark.service


def test_serve_with_two_workers_and_restart_after_kill(tmp_path, monkeypatch):
    monkeypatch.setenv("GRIDML_HOME", str(tmp_path))
    url = f"sqlite:///{tmp_path / 'served.db'}"
    server = ServerProcess(url, workers=2, log=tmp_path / "serve.log").start()
    try:
        owner = ApiClient(server.url, retries=8, backoff=0.1)
        owner.create_study("served", {"search": {"algorithm": "external",
                                                 "objective": "val_loss", "space": {}}})
        trial = owner.enqueue_trial("served", {})
        for n in (1, 2):
            owner.post_epoch(trial["id"], EpochReport(n, {"val_loss": 1.0 / n}, 1.0))
        server.kill()
        server.start()
        owner.post_epoch(trial["id"], EpochReport(2, {"val_loss": 0.5}, 1.0))  # a repeat: no-op
        owner.post_epoch(trial["id"], EpochReport(3, {"val_loss": 0.25}, 1.0))
        assert [e.epoch for e in owner.list_epochs(trial["id"])] == [1, 2, 3]
        assert owner.get_study("served")["counts"]["running"] == 1
    finally:
        server.stop()
    assert "Traceback" not in (tmp_path / "serve.log").read_text()
