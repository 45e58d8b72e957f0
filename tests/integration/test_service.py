"""A grid campaign registered over HTTP is driven by the server-side controller."""

from __future__ import annotations

from pathlib import Path


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
