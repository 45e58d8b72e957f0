"""The real PyTorch payload under the real ``torchrun --nproc-per-node 2`` (gloo, CPU) on tiny
sample data: outputs (model.pt, model.onnx checked with onnxruntime), resume after SIGKILL, and
model.onnx for a Keras model (tf2onnx)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from test_payload_train import ROOT, payload_env, write_trial

pytest.importorskip("torch")
pytestmark = pytest.mark.slow


def torch_trial(tmp: Path, train: list[Path], val: list[Path], model: Path | None = None,
                **training: object) -> Path:
    return write_trial(tmp, train, val, training={"framework": "torch", "epochs": 2, **training},
                       model_file=str(model or ROOT / "examples/models/deepsets_torch.py"))


def torchrun(trial: Path, ranks: int = 2) -> list[str]:
    bindir = Path(sys.executable).parent
    return [str(bindir / "torchrun"), "--nnodes", "1", "--nproc-per-node", str(ranks),
            "--rdzv-backend", "c10d", "--rdzv-endpoint", "localhost:0", "-m",
            "payloads.train_torch", str(trial)]


def run_torch(trial: Path, ranks: int = 2, timeout: int = 240) -> subprocess.CompletedProcess:
    return subprocess.run(torchrun(trial, ranks), cwd=trial.parent, env=payload_env(),
                          capture_output=True, text=True, timeout=timeout)


def _epochs(out: Path) -> list[int]:
    path = out / "metrics.jsonl"
    return [json.loads(x)["epoch"] for x in path.read_text().splitlines() if x.strip()] \
        if path.exists() else []


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[Path], list[Path]]:
    from make_sample_data import make_sample_data

    return make_sample_data(tmp_path_factory.mktemp("data"), n_train=800, n_val=300, n_files=2)


def test_two_ranks_train_report_and_export(tmp_path: Path, small: tuple) -> None:
    trial = torch_trial(tmp_path, *small, batch_size=64)
    proc = run_torch(trial)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = tmp_path / "outputs"
    assert {"model.pt", "model.onnx", "model_source.py", "curves.png", "metrics.jsonl",
            "provenance.json", "result.json"} <= {p.name for p in out.iterdir()}
    reports = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in reports] == [1, 2]
    assert {"loss", "accuracy", "auc", "val_loss", "val_accuracy", "val_auc"} <= set(reports[0]["metrics"])
    assert reports[0]["extra"]["ranks"] == 2 and 0 <= reports[1]["input_wait_frac"] < 1
    # each rank its shard: 800 rows over 2 ranks, all of them per epoch
    assert reports[0]["extra"]["train_samples"] == 800
    prov = json.loads((out / "provenance.json").read_text())
    assert prov["framework"] == "torch" and prov["runtime"]["torch"]
    assert prov["runtime"]["learning_rate"] == pytest.approx(0.003 * 2)  # linear scaling
    assert prov["runtime"]["onnx"]["verified"] is True
    assert json.loads((out / "result.json").read_text())["state"] == "completed"
    assert "threads {'cores': 2, 'local_ranks': 2, 'per_rank': 1" in proc.stderr

    # the model rebuilt from model.pt + model_source.py gives what onnxruntime gives
    import onnxruntime as ort
    import torch

    from payloads.runtime.torch_model import rebuild

    model = rebuild(out / "model.pt")
    rows = np.random.default_rng(1).normal(size=(6, 10)).astype("f4")
    with torch.no_grad():
        want = model(torch.from_numpy(rows)).numpy()
    sess = ort.InferenceSession(str(out / "model.onnx"), providers=["CPUExecutionProvider"])
    got = sess.run(None, {sess.get_inputs()[0].name: rows})[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_ragged_tracks_and_the_training_step_hook(tmp_path: Path) -> None:
    from make_sample_data import make_sample_data

    train, val = make_sample_data(tmp_path / "data", n_train=600, n_val=200, n_files=1, ragged=True)
    model = tmp_path / "hooked.py"
    model.write_text(
        f"exec(open({str(ROOT / 'examples/models/deepsets_torch.py')!r}).read())\n"
        "CALLS = []\n"
        "def training_step(model, batch, loss_fn):\n"
        "    (jet, tracks), y = batch\n"
        "    out = model(jet, tracks)\n"
        "    return loss_fn(out, y), out\n")
    trial = torch_trial(tmp_path, train, val, model, batch_size=50, bucket_by_length=True)
    text = json.loads(trial.read_text())
    text["data"] = {**text["data"], "features": ["x", "tracks"], "ragged": ["tracks"]}
    trial.write_text(json.dumps(text))
    proc = run_torch(trial)
    assert proc.returncode == 0, proc.stderr[-3000:]
    prov = json.loads((tmp_path / "outputs" / "provenance.json").read_text())
    assert prov["runtime"]["onnx"]["verified"] is True
    assert "auc" in json.loads((tmp_path / "outputs/result.json").read_text())["objective_metrics"]


def test_killed_trial_resumes_at_the_right_epoch(tmp_path: Path) -> None:
    from make_sample_data import make_sample_data

    train, val = make_sample_data(tmp_path / "data", n_train=1200, n_val=200, n_files=2)
    slow = tmp_path / "slow.py"  # a few ms per step, so the kill lands between epochs
    slow.write_text(f"exec(open({str(ROOT / 'examples/models/deepsets_torch.py')!r}).read())\n"
                    "import time\n"
                    "def training_step(model, batch, loss_fn):\n"
                    "    time.sleep(0.01)\n"
                    "    x, y = batch\n"
                    "    out = model(x)\n"
                    "    return loss_fn(out, y), out\n")
    trial = torch_trial(tmp_path, train, val, slow, epochs=3, batch_size=16)
    out = tmp_path / "outputs"
    proc = subprocess.Popen(torchrun(trial), cwd=tmp_path, env=payload_env(),
                            start_new_session=True, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    state = out / "checkpoint" / "state.json"
    deadline = time.monotonic() + 240
    try:
        while not state.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)
    done = json.loads(state.read_text())["epoch"]
    assert 1 <= done < 3, f"killed too late (after epoch {done})"
    first = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()][:done]

    again = run_torch(trial)
    assert again.returncode == 0, again.stderr[-3000:]
    assert f"resuming after epoch {done}" in again.stderr
    assert _epochs(out) == [1, 2, 3]
    after = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()][:done]
    assert [r["metrics"] for r in after] == [r["metrics"] for r in first]  # kept, not re-run
    assert json.loads((out / "result.json").read_text())["epochs"] == 3


def test_keras_model_onnx_matches_the_model(tmp_path: Path) -> None:
    pytest.importorskip("tf2onnx")
    code = f"""
import sys, json
sys.path.insert(0, {str(ROOT / 'examples/models')!r})
import numpy as np, onnxruntime as ort, mlp, deepsets
from pathlib import Path
from payloads.runtime import outputs
for name, m in (("mlp", mlp.build_model({{"units": 8}}, (10,))),
                ("deepsets", deepsets.build_model({{"units": 8}}, ((10,), (None, 2))))):
    out = Path({str(tmp_path)!r}) / name
    out.mkdir()
    outputs.save_model(m, out, "binary_crossentropy", [])
    assert outputs._ONNX["keras"]["verified"], outputs._ONNX
    rows = [np.random.default_rng(2).normal(size=(4, *[3 if d is None else d for d in t.shape[1:]])).astype("f4") for t in m.inputs]
    s = ort.InferenceSession(str(out / "model.onnx"), providers=["CPUExecutionProvider"])
    got = s.run(None, {{i.name: r for i, r in zip(s.get_inputs(), rows)}})[0]
    want = m(rows if len(rows) > 1 else rows[0], training=False).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
print("ok")
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300, env=payload_env(), cwd=ROOT)
    assert proc.returncode == 0 and "ok" in proc.stdout, proc.stderr[-3000:]
