"""Weights, collections with masks, figures of merit and their artifacts, through the real
payloads: torch under torchrun (2 ranks, gloo) and Keras under horovodrun (2 ranks); the test
split (data.test, here the validation files again) evaluated once after training."""

from __future__ import annotations

import json
from pathlib import Path

import h5py
import numpy as np
import pytest

from test_payload_train import run_payload, write_trial

pytestmark = pytest.mark.slow

TORCH_MODEL = '''
import torch


class Net(torch.nn.Module):
    """ParticleNet-style: (points, features, mask) plus the jet's own features."""

    def __init__(self, n_jet, n_feat):
        super().__init__()
        self.jet = torch.nn.Linear(n_jet, 8)
        self.edge = torch.nn.Linear(n_feat + 1, 8)
        self.out = torch.nn.Linear(16, 1)

    def forward(self, x, points, tracks, tracks_mask):
        m = tracks_mask.unsqueeze(-1).float()
        h = torch.relu(self.edge(torch.cat([points, tracks], -1))) * m
        pooled = h.sum(1) / m.sum(1).clamp(min=1)
        return self.out(torch.cat([torch.relu(self.jet(x)), pooled], -1))


def build_model(hparams, input_shape):
    (n_jet,), points, tracks, mask = input_shape
    assert points[-1] == 1 and tracks[-1] == 2 and len(mask) == 1, input_shape
    return Net(n_jet, tracks[-1])


def metrics(y_true, y_score, weights):
    import numpy as np
    sig = np.asarray(y_true).reshape(-1) > 0.5
    s = np.asarray(y_score).reshape(-1)
    return {"mean_sig_score": float(np.average(s[sig], weights=weights[sig]))}
'''

KERAS_MODEL = '''
from tensorflow import keras


def build_model(hparams, input_shape):
    jets_shape, tracks_shape, mask_shape = input_shape
    x = keras.Input(jets_shape, name="x")
    t = keras.Input(tracks_shape, name="tracks")
    m = keras.Input(mask_shape, name="tracks_mask")
    mf = keras.layers.Lambda(lambda a: keras.backend.cast(a, "float32")[..., None])(m)
    h = keras.layers.Dense(8, activation="relu")(t)
    pooled = keras.layers.Lambda(lambda a: keras.backend.sum(a[0] * a[1], 1))([h, mf])
    z = keras.layers.Concatenate()([keras.layers.Dense(8, activation="relu")(x), pooled])
    return keras.Model({"x": x, "tracks": t, "tracks_mask": m},
                       keras.layers.Dense(1, activation="sigmoid")(z))


def metrics(y_true, y_score, weights):
    import numpy as np
    assert len(y_true) == len(y_score) == len(weights)
    sig = np.asarray(y_true).reshape(-1) > 0.5
    return {"mean_sig_score": float(np.average(np.asarray(y_score).reshape(-1)[sig],
                                               weights=weights[sig]))}
'''


def _with_weights_and_collections(files: list[Path], padded: bool, length: int = 12) -> None:
    """Add what ``gridml prepare`` writes: weights ``w`` (some negative) and the collection
    ``tracks`` (columns frac, dr) padded (+ tracks_mask) or ragged (columns on tracks_values)."""
    rng = np.random.default_rng(7)
    for path in files:
        with h5py.File(path, "a") as f:
            n = len(f["y"])
            rows = f["y"].chunks[0]
            w = rng.uniform(0.5, 1.5, n).astype(np.float32)
            w[rng.random(n) < 0.05] *= -0.2
            f.create_dataset("w", data=w, chunks=(rows,))
            names = np.array(["frac", "dr"], dtype=h5py.string_dtype())
            f["tracks_values"].attrs["columns"] = names
            if padded:
                lengths = f["tracks_lengths"][:]
                values = f["tracks_values"][:]
                starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
                pad = np.zeros((n, length, 2), np.float32)
                mask = np.zeros((n, length), np.uint8)
                for i in range(n):
                    k = min(length, int(lengths[i]))
                    pad[i, :k] = values[starts[i]:starts[i] + k]
                    mask[i, :k] = 1
                del f["tracks_values"]
                f.create_dataset("tracks", data=pad, chunks=(rows, length, 2))
                f["tracks"].attrs["columns"] = names
                f.create_dataset("tracks_mask", data=mask, chunks=(rows, length))


@pytest.fixture(scope="module", params=["ragged", "padded"])
def data(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    from make_sample_data import make_sample_data

    train, val = make_sample_data(tmp_path_factory.mktemp("data"), n_train=3000, n_val=1500,
                                  n_files=2, ragged=True)
    _with_weights_and_collections(train + val, request.param == "padded")
    return request.param, train, val


def test_torch_collection_mask_weights_and_rejection(tmp_path: Path, data) -> None:
    from test_payload_torch import run_torch

    layout, train, val = data
    model = tmp_path / "pnet.py"
    model.write_text(TORCH_MODEL)
    trial = write_trial(
        tmp_path, train, val, model_file=str(model), hparams={"learning_rate": 0.01},
        data={"features": ["x", "points", "tracks"], "collections": ["tracks"],
              "views": [{"name": "points", "collection": "tracks", "columns": ["dr"]}],
              "weights": "w", "test": [str(p) for p in val]},
        training={"framework": "torch", "epochs": 2, "batch_size": 64,
                  "metrics": ["accuracy", "auc", "rejection_at_50", "mean_sig_score"],
                  "class_weights": "balanced"})
    proc = run_torch(trial)
    assert proc.returncode == 0, proc.stderr[-4000:]
    out = tmp_path / "outputs"
    reports = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    last = reports[-1]["metrics"]
    assert last["val_rejection_at_50"] > 2, last
    assert 0 < last["val_mean_sig_score"] < 1
    assert last["val_auc"] > 0.6
    roc = json.loads((out / "roc.json").read_text())
    assert roc["output"] == "logit"
    assert roc["rejection"]["rejection_at_50"] == pytest.approx(last["val_rejection_at_50"])
    for name in ("roc.png", "scores.png"):
        assert (out / name).read_bytes()[:4] == b"\x89PNG"
    prov = json.loads((out / "provenance.json").read_text())
    assert prov["runtime"]["output"] == "logit"
    import onnx

    meta = {p.key: p.value for p in onnx.load(str(out / "model.onnx")).metadata_props}
    assert meta["gridml.output"] == "logit"
    assert [i.name for i in onnx.load(str(out / "model.onnx")).graph.input] == [
        "x", "points", "tracks", "tracks_mask"]
    _check_test_split(out, reports, "logit")


def _check_test_split(out: Path, reports: list[dict], output: str) -> None:
    """data.test is the validation files: the one evaluation after training (same model as
    the last epoch's validation, all ranks) gives the last epoch's figures, apart from the
    epochs (result.json's test, roc_test.*), and no epoch report carries a test figure."""
    last = reports[-1]["metrics"]
    test = json.loads((out / "result.json").read_text())["test"]
    got = test["metrics"]
    assert test["rows"] == 1500 and sorted(test["files"]) == [
        "roc_test.json", "roc_test.png", "scores_test.png"], test
    for name in ("rejection_at_50", "auc", "loss", "mean_sig_score"):
        assert got[name] == pytest.approx(last[f"val_{name}"], rel=1e-3, abs=1e-4), (name, got)
    assert {"rejection_at_70", "rejection_at_90"} <= set(got)  # always, beside the requested
    roc = json.loads((out / "roc_test.json").read_text())
    assert roc["output"] == output
    assert roc["rejection"]["rejection_at_50"] == pytest.approx(got["rejection_at_50"])
    for name in ("roc_test.png", "scores_test.png"):
        assert (out / name).read_bytes()[:4] == b"\x89PNG"
    assert not any(k.startswith("test") for r in reports for k in r["metrics"])


@pytest.mark.parametrize("data", ["padded"], indirect=True)  # the layouts differ in torch's feed only
def test_keras_two_inputs_with_weights(tmp_path: Path, data) -> None:
    layout, train, val = data
    model = tmp_path / "two.py"
    model.write_text(KERAS_MODEL)
    trial = write_trial(
        tmp_path, train, val, model_file=str(model), hparams={"learning_rate": 0.01},
        data={"features": ["x", "tracks"], "collections": ["tracks"], "weights": "w",
              "test": [str(p) for p in val]},
        training={"epochs": 2, "batch_size": 64, "metrics": ["accuracy", "auc",
                                                             "rejection_at_50",
                                                             "mean_sig_score"]})
    proc = run_payload(trial)
    assert proc.returncode == 0, proc.stderr[-4000:]
    out = tmp_path / "outputs"
    reports = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    last = reports[-1]["metrics"]
    assert last["val_rejection_at_50"] > 2, last
    assert 0.5 < last["val_mean_sig_score"] < 1, last  # the hook, on both ranks' scores
    roc = json.loads((out / "roc.json").read_text())
    assert roc["output"] == "probability"
    assert roc["rejection"]["rejection_at_50"] == pytest.approx(last["val_rejection_at_50"])
    assert (out / "roc.png").exists() and (out / "scores.png").exists()
    assert json.loads((out / "provenance.json").read_text())["runtime"]["output"] == "probability"
    if (out / "model.onnx").exists():  # best-effort export (tf2onnx)
        import onnx

        meta = {p.key: p.value for p in onnx.load(str(out / "model.onnx")).metadata_props}
        assert meta["gridml.output"] == "probability"
    _check_test_split(out, reports, "probability")
