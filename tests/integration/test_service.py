"""A grid campaign registered over HTTP is driven by the server-side controller."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from gridml.client import ApiClient
from gridml.data.local import LocalStore
from gridml.store import open_store
from gridml.server.embedded import EmbeddedServer
from gridml.service import CampaignService
from gridml.settings import settings
from gridml.spec import load_spec
from tests.helpers import register_tiny_datasets, write_spec


def test_registered_study_is_asked_planned_and_submitted(gridml_home: Path, tmp_path: Path) -> None:
    register_tiny_datasets(LocalStore(settings().store_dir), tmp_path, "user.s")
    spec = write_spec(tmp_path / "spec.yaml", "grid1", "user.s:train", "user.s:val",
                      backend="backend: {executor: dryrun, data: local, server: embedded}\n")
    loaded = load_spec(spec)
    body = loaded.resolved()
    body["x_model_source"] = loaded.model_path.read_text()
    body["payload"]["model"] = "/elsewhere/on/the/submit/host/mlp.py"  # the server has its own copy
    with EmbeddedServer(settings().db_url) as server:
        with ApiClient(server.url) as client:
            created = client.create_study("grid1", body, loaded.hash)
        store = open_store(settings().db_url)
        service = CampaignService(store, settings().runs_dir, server.url, poll_s=0)
        assert service.run_once() == 1
        trials = store.list_trials(created["id"])
        assert [t.state for t in trials] == ["running", "running"]
        assert all(t.external_id and t.external_id.startswith("dryrun:") for t in trials)
        model = settings().runs_dir / "grid1" / "model" / "mlp.py"
        assert model.read_text() == body["x_model_source"]
        service.stop()


def test_a_study_no_campaign_can_be_built_from_never_stops_the_others(
        gridml_home: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Two broken studies registered before a good one (a spec whose backend is not a section, one
    no Spec validates): each is logged and set failed, and the good one is driven in the same cycle."""
    register_tiny_datasets(LocalStore(settings().store_dir), tmp_path, "user.s")
    spec = write_spec(tmp_path / "spec.yaml", "good", "user.s:train", "user.s:val",
                      backend="backend: {executor: dryrun, data: local, server: embedded}\n")
    loaded = load_spec(spec)
    with EmbeddedServer(settings().db_url) as server:
        store = open_store(settings().db_url)
        # stored as a careless client (or an older server that checked nothing) left them
        bad = [store.create_study("broken-backend", {"backend": "x"}, "h1"),
               store.create_study("broken-spec", {"backend": {"executor": "panda"}}, "h2")]
        with ApiClient(server.url) as client:
            body = loaded.resolved()
            body["x_model_source"] = loaded.model_path.read_text()
            good = client.create_study("good", body, loaded.hash)
        service = CampaignService(store, settings().runs_dir, server.url, poll_s=0)
        with caplog.at_level(logging.ERROR, logger="gridml.service"):
            assert service.run_once() == 1
        assert [store.get_study(s.id).state for s in bad] == ["failed", "failed"]
        assert all(any(s.name in r.getMessage() for r in caplog.records) for s in bad)
        trials = store.list_trials(good["id"])
        assert [t.state for t in trials] == ["running", "running"]
        assert service.run_once() == 1  # the failed ones are no longer taken up
        assert store.get_study(good["id"]).state == "running"
        service.stop()
