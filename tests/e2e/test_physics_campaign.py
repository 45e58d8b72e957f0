"""The physicist's task end to end, on real collision data (the quark/gluon dijet file that
scikit-hep-testdata 0.2.0 ships), with exactly the files of examples/physics/ (docs/physics.md):

ROOT -> ``gridml prepare prepare.yaml`` (two samples of one file as labels, per-sample weights,
the leading jet's tracks as one padded collection with four channels) -> ``gridml submit
spec.yaml`` (a torch campaign, a ParticleNet-style ``(points, features, mask)`` model written as
``build_model`` only, ``objective: val_rejection_at_50``) -> ``gridml fetch --best``: model.pt,
model.onnx, roc.png, scores.png, roc.json. The ONNX model, rebuilt in onnxruntime on the
validation shards, gives the rejection the campaign stored (within roc.json's binning error).
spec.yaml names the test split (``data.test``): each trial's figures on it are stored apart
(``gridml status``/``best``: test_metrics), never in an epoch, and fetched as roc_test.*.
Then ``spec_keras.yaml``: a Keras two-input model on the same data."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import ROOT, gridml, gridml_json

pytest.importorskip("torch")
pytest.importorskip("skhep_testdata", reason="pip install scikit-hep-testdata==0.2.0")
pytestmark = [pytest.mark.e2e, pytest.mark.slow]

EXAMPLE = ROOT / "examples" / "physics"
FIGURES = ("roc.json", "roc.png", "scores.png")
TEST_FIGURES = ("roc_test.json", "roc_test.png", "scores_test.png")  # data.test's

# Rebuild model.onnx in onnxruntime, feed it the validation shards' (points, tracks, tracks_mask)
# and compute the weighted background efficiency at 50 % signal efficiency exactly (the threshold
# at the weighted signal median); prints the input names, the metadata and that efficiency.
CHECK_ONNX = '''\
import glob, json, sys
import h5py, numpy as np, onnxruntime as ort
s = ort.InferenceSession(sys.argv[1])
types = {i.name: i.type for i in s.get_inputs()}
d, y, w = [], [], []
for path in sorted(glob.glob(sys.argv[2] + "/val-*.h5")):
    with h5py.File(path) as fh:
        tracks, columns = fh["tracks"][:], list(fh["tracks"].attrs["columns"])
        points = tracks[..., [columns.index("trk_deta"), columns.index("trk_dphi")]]
        feeds = {"points": points, "tracks": tracks, "tracks_mask": fh["tracks_mask"][:]}
        feeds = {k: v.astype(np.uint8 if "uint8" in types[k] else np.float32)
                 for k, v in feeds.items()}
        out = s.run(None, feeds)[0]
        assert out.shape == (len(tracks), 1), out.shape
        d.append(out[:, 0]); y.append(fh["y"][:]); w.append(fh["w"][:])
d, y, w = map(np.concatenate, (d, y, w))
sig = y == 1
order = np.argsort(-d[sig])
cum = np.cumsum(w[sig][order]) / w[sig].sum()
threshold = d[sig][order][np.searchsorted(cum, 0.5)]
eps_b = w[~sig][d[~sig] >= threshold].sum() / w[~sig].sum()
print(json.dumps({"inputs": list(types), "meta": s.get_modelmeta().custom_metadata_map,
                  "eps_b": float(eps_b), "n": int(len(d))}))
'''


@pytest.fixture(scope="module")
def prepared(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """examples/physics/ copied unchanged, the ROOT file linked by its link_data.py, and
    ``gridml prepare prepare.yaml --dataset user.demo:qg`` run in it; (the folder, GRIDML_HOME)."""
    ws = tmp_path_factory.mktemp("physics")
    home = ws / "home"
    work = ws / "physics"
    shutil.copytree(EXAMPLE, work, ignore=shutil.ignore_patterns("data", "prepared", "__pycache__"))
    link = subprocess.run([sys.executable, str(work / "link_data.py"), str(work)],
                          capture_output=True, text=True, timeout=120)
    assert link.returncode == 0, link.stderr
    env = {"GRIDML_HOME": str(home)}
    summary = json.loads(gridml("prepare", str(work / "prepare.yaml"), "--dataset", "user.demo:qg",
                                "-j", "2", "-q", "--json", env=env, timeout=600).stdout)
    assert summary["collections"]["tracks"]["columns"] == ["trk_deta", "trk_dphi", "trk_log_pt",
                                                           "jet1TrksChg"]
    assert {s: v["label"] for s, v in summary["samples"].items()} == {"quark": 1, "gluon": 0}
    assert summary["samples"]["gluon"]["weight_scale"] == pytest.approx(0.8)
    assert set(summary["datasets"]) >= {"train", "val", "test"}
    return work, home


def test_torch_particlenet_style_campaign_optimises_rejection_and_fetches_the_roc(
        prepared: tuple[Path, Path], tmp_path: Path) -> None:
    work, home = prepared
    env = {"GRIDML_HOME": str(home)}
    proc = gridml("submit", str(work / "spec.yaml"), "--quiet", env=env, timeout=900)
    trials = gridml_json("status", "qg-particlenet", env=env)["trials"]
    assert [t["state"] for t in trials] == ["completed"] * 2, [t["error"] for t in trials]
    for t in trials:
        epochs = gridml_json("status", "qg-particlenet", "--trial", str(t["number"]),
                             env=env)["epochs"]
        assert [e["epoch"] for e in epochs] == [1, 2]
        assert {"loss", "val_loss", "val_auc", "val_rejection_at_50"} <= set(epochs[-1]["metrics"])
        # data.test: stored apart, never an epoch metric (so never seen by the search)
        assert not any(k.startswith("test") for e in epochs for k in e["metrics"])
        test = t["test_metrics"]
        assert {"loss", "auc", "rejection_at_50", "rejection_at_90"} <= set(test), test
        assert test["rejection_at_50"] > 1.0 and 0.5 < test["auc"] <= 1
        assert test["rejection_at_50"] != t["objective"]  # other events than validation's
    best = gridml_json("best", "qg-particlenet", env=env)
    assert best["objective_name"] == "val_rejection_at_50" and best["direction"] == "maximize"
    assert best["objective"] == max(t["objective"] for t in trials)
    assert best["objective"] > 1.0  # a tagger better than a coin: fewer gluons than quarks kept
    assert f"best trial {best['number']}" in proc.stdout
    assert best["test_metrics"] == next(t for t in trials
                                        if t["number"] == best["number"])["test_metrics"]
    shown = gridml("best", "qg-particlenet", env=env).stdout
    assert "test split" in shown and f"rejection_at_50 = {best['test_metrics']['rejection_at_50']:.5g}" in shown

    dest = tmp_path / "best"
    gridml("fetch", "qg-particlenet", "--best", "-o", str(dest), env=env)
    prefix = f"qg-particlenet.trial-{best['number']:04d}."
    names = {p.name for p in dest.iterdir()}
    assert {prefix + n for n in ("model.pt", "model.onnx", *FIGURES, *TEST_FIGURES)} <= names, names
    roc_test = json.loads((dest / (prefix + "roc_test.json")).read_text())
    assert roc_test["rejection"]["rejection_at_50"] == pytest.approx(
        best["test_metrics"]["rejection_at_50"], rel=1e-9)
    result = json.loads((dest / (prefix + "result.json")).read_text())
    assert result["test"]["metrics"]["auc"] == pytest.approx(best["test_metrics"]["auc"])
    assert all((dest / (prefix + n)).read_bytes()[:4] == b"\x89PNG" for n in FIGURES[1:])
    roc = json.loads((dest / (prefix + "roc.json")).read_text())
    assert roc["rejection"]["rejection_at_50"] == pytest.approx(best["objective"], rel=1e-9)
    assert roc["output"] == "logit"
    assert len(roc["signal_efficiency"]) == len(roc["background_efficiency"]) > 10

    # the ONNX model, in onnxruntime on the validation shards, gives the stored figure
    run = subprocess.run([sys.executable, "-c", CHECK_ONNX, str(dest / (prefix + "model.onnx")),
                          str(work / "prepared")], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    got = json.loads(run.stdout.strip().splitlines()[-1])
    assert got["inputs"] == ["points", "tracks", "tracks_mask"]
    assert got["meta"]["gridml.output"] == "logit"
    eps_b = 1.0 / roc["rejection"]["rejection_at_50"]
    assert abs(got["eps_b"] - eps_b) <= roc["binning_error"]["rejection_at_50"] + 1e-3, (got, roc)

    # a single trial's figures come back too
    other = next(t for t in trials if t["number"] != best["number"])
    one = tmp_path / "one"
    gridml("fetch", "qg-particlenet", "--trial", str(other["number"]), "-o", str(one), env=env)
    assert {f"qg-particlenet.trial-{other['number']:04d}.{n}" for n in FIGURES} <= {
        p.name for p in one.iterdir()}


def test_keras_two_input_model_on_the_same_data(prepared: tuple[Path, Path],
                                                 tmp_path: Path) -> None:
    pytest.importorskip("tensorflow")
    work, home = prepared
    env = {"GRIDML_HOME": str(home)}
    gridml("submit", str(work / "spec_keras.yaml"), "--quiet", env=env, timeout=900)
    (trial,) = gridml_json("status", "qg-keras", env=env)["trials"]
    assert trial["state"] == "completed", trial["error"]
    best = gridml_json("best", "qg-keras", env=env)
    dest = tmp_path / "best"
    gridml("fetch", "qg-keras", "--best", "-o", str(dest), env=env)
    prefix = f"qg-keras.trial-{best['number']:04d}."
    names = {p.name for p in dest.iterdir()}
    assert {prefix + n for n in ("model.keras", *FIGURES)} <= names, names
    roc = json.loads((dest / (prefix + "roc.json")).read_text())
    assert roc["rejection"]["rejection_at_50"] == pytest.approx(best["objective"], rel=1e-9)
    assert roc["output"] == "probability"
    if prefix + "model.onnx" in names:  # best-effort export (tf2onnx): its metadata says so
        code = ("import sys, onnxruntime as ort; s = ort.InferenceSession(sys.argv[1]); "
                "print(s.get_modelmeta().custom_metadata_map.get('gridml.output'), "
                "sorted(i.name for i in s.get_inputs()))")
        run = subprocess.run([sys.executable, "-c", code, str(dest / (prefix + "model.onnx"))],
                             capture_output=True, text=True, timeout=120)
        assert run.returncode == 0, run.stderr[-2000:]
        assert run.stdout.split()[0] == "probability"
