"""`gridml evaluate --server URL --token STUDY_TOKEN` against a real `gridml serve` process: the
phpo point becomes a trial of the study there, every epoch the payload trains lands as that
trial's epoch report, and the trial finishes with the loss output.json gives iDDS; the metrics
tarball's evaluation.json names the trial (what gridml's phpo executor reads to complete it
instead of recording the point twice)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from gridml.client import ApiClient
from gridml.server.process import ServerProcess
from gridml.spec import load_spec
from tests.helpers import ROOT
from tests.integration.test_phpo_evaluate import job_dir

pytestmark = [pytest.mark.slow, pytest.mark.service]


def test_every_epoch_lands_as_a_trial_of_the_study(tmp_path: Path) -> None:
    job = job_dir(tmp_path)
    spec = job / "spec.yaml"
    spec.write_text(spec.read_text().replace("epochs: 1,", "epochs: 2,").replace("workers: 2", "workers: 1"))
    loaded = load_spec(spec)
    server = ServerProcess(f"sqlite:///{tmp_path / 'gridml.db'}", log=tmp_path / "serve.log").start()
    try:
        with ApiClient(server.url) as owner:
            study = owner.create_study(loaded.spec.name, loaded.resolved(), loaded.hash)
        env = {**os.environ, "ATHENA_CORE_NUMBER": "1", "PYTHONPATH": str(ROOT)}
        proc = subprocess.run([sys.executable, "-m", "gridml.cli", "evaluate", "--spec", "spec.yaml",
                               "--evaluationMetrics", "metrics.tgz", "--server", server.url,
                               "--token", study["token"]], cwd=job, env=env,
                              capture_output=True, text=True, timeout=600, check=False)
        out = json.loads((job / "output.json").read_text())
        assert proc.returncode == 0 and out["status"] == 0, (out, proc.stderr[-3000:])
        with ApiClient(server.url, study["token"]) as client:
            trials = client.list_trials(loaded.spec.name)
            assert len(trials) == 1
            trial = trials[0]
            assert trial["state"] == "completed" and trial["hparams"]["units"] == 12
            assert trial["objective"] == pytest.approx(out["loss"])
            epochs = client._request("GET", f"/api/v1/trials/{trial['id']}/epochs")
        assert [e["epoch"] for e in epochs] == [1, 2]
        assert epochs[-1]["metrics"]["val_loss"] == pytest.approx(out["loss"])
        with tarfile.open(job / "metrics.tgz") as tar:
            ev = json.load(tar.extractfile("evaluation.json"))  # type: ignore[arg-type]
        assert ev["trial_id"] == trial["id"] and ev["hparams"] == trial["hparams"]
    finally:
        server.stop()
    assert "Traceback" not in (tmp_path / "serve.log").read_text()
