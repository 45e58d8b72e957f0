"""GET /api/v1/studies/{study}/roc (the dashboard's ROC overlay) and a trial's test_metrics, on
a real uvicorn over a real SQLite store and the real local data store: the best completed
trials' stored roc.json curves, best first, thinned; a trial without one is listed as missing."""

from __future__ import annotations

import json
import math

import httpx
import numpy as np

from gridml.data import open_data_manager
from gridml.store import open_store

SPEC = {"name": "rocs", "search": {"objective": "val_rejection_at_50", "direction": "maximize"},
        "backend": {"data": "local"}}


def _roc(tmp, number: int, auc: float) -> dict:
    eff_s = np.linspace(0, 1, 1500)
    body = {"signal_efficiency": eff_s.tolist(),
            "background_efficiency": (eff_s ** (1 / (1 - auc) - 1)).tolist(), "auc": auc,
            "rejection": {"rejection_at_50": 10.0, "rejection_at_90": "inf"}, "output": "logit"}
    path = tmp / f"rocs.trial-{number:04d}.roc.json"
    path.write_text(json.dumps(body))
    return body


def test_best_trials_roc_curves_and_test_metrics(tmp_path, monkeypatch) -> None:
    from gridml.server.embedded import EmbeddedServer

    monkeypatch.setenv("GRIDML_HOME", str(tmp_path / "home"))
    url = f"sqlite:///{tmp_path / 'home' / 'gridml.db'}"
    (tmp_path / "home").mkdir()
    store = open_store(url)
    study = store.create_study("rocs", SPEC, "h")
    dm = open_data_manager("local")
    objectives = {0: 3.0, 1: 7.0, 2: 5.0, 3: 9.0}  # trial 3 has no roc.json
    for number, objective in objectives.items():
        trial = store.create_trial(study.id, {"x": number})
        outputs = []
        if number != 3:
            _roc(tmp_path, number, 0.6 + 0.1 * number)
            name = f"rocs.trial-{number:04d}.roc.json"
            (info,) = dm.upload([tmp_path / name], "user.t:rocs.out")
            outputs = [{"did": str(info.did), "name": name}]
        store.update_trial(trial.id, state="completed", objective=objective, outputs=outputs,
                           test_metrics={"auc": 0.7, "rejection_at_90": math.inf})
    store.close()
    with EmbeddedServer(url) as server, httpx.Client(base_url=server.url, timeout=30) as http:
        doc = http.get("/api/v1/studies/rocs/roc", params={"n": 3}).json()
        assert [t["number"] for t in doc["trials"]] == [1, 2]  # 3, 1, 2 best; 3 has none
        assert doc["missing"] == [{"number": 3, "reason": "no roc.json among its outputs"}]
        first = doc["trials"][0]
        assert first["objective"] == 7.0 and first["auc"] == 0.7 and first["output"] == "logit"
        assert first["rejection"] == {"rejection_at_50": 10.0, "rejection_at_90": "inf"}
        assert 300 < len(first["signal_efficiency"]) == len(first["background_efficiency"]) <= 400
        assert first["signal_efficiency"][0] == 0 and first["signal_efficiency"][-1] == 1
        assert [t["number"] for t in http.get("/api/v1/studies/rocs/roc").json()["trials"]] \
            == [1, 2, 0]
        assert http.get("/api/v1/studies/rocs/roc", params={"n": 0}).status_code == 422
        assert http.get("/api/v1/studies/nope/roc").status_code == 404
        trials = http.get("/api/v1/studies/rocs/trials").json()["trials"]
        assert trials[0]["test_metrics"] == {"auc": 0.7, "rejection_at_90": None}
