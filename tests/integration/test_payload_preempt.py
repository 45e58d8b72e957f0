"""A trial told its job ends soon (SIGUSR1, as Slurm's ``--signal=B:USR1@grace`` forwarded by
the batch script) checkpoints at the next batch boundary, on every rank the same, exits 75
("continue me"), and a second run goes on from that exact batch with the same shuffle: the
final model equals an uninterrupted run's, each epoch is reported once, the resumed epoch's
training metrics are those of the whole epoch. The real torch payload under torchrun (2 ranks,
gloo, CPU); the Keras payload alone (1 rank, as gridml starts a one-worker trial)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from gridml.planner import payload_command
from test_payload_train import ROOT, payload_env, write_trial

pytestmark = pytest.mark.slow

# the model file sends the signal itself, to its own rank (real SIGUSR1, real handler), after
# the $SIGNAL_AT-th training step of rank $SIGNAL_RANK: exactly the same place every run
SIGNALLING = """
import os, signal
_calls = [0]
def training_step(model, batch, loss_fn):
    _calls[0] += 1
    if (os.environ.get("SIGNAL_AT") and os.environ.get("RANK", "0") == os.environ["SIGNAL_RANK"]
            and _calls[0] == int(os.environ["SIGNAL_AT"])):
        os.kill(os.getpid(), signal.SIGUSR1)
    x, y = batch
    out = model(x)
    return loss_fn(out, y), out
"""


def _reports(out: Path) -> list[dict]:
    return [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines() if x.strip()]


def _torchrun(trial: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    bindir = Path(sys.executable).parent
    cmd = [str(bindir / "torchrun"), "--nnodes", "1", "--nproc-per-node", "2", "--rdzv-backend",
           "c10d", "--rdzv-endpoint", "localhost:0", "-m", "payloads.train_torch", str(trial)]
    return subprocess.run(cmd, cwd=trial.parent, env=env, capture_output=True, text=True,
                          timeout=240)


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[Path], list[Path]]:
    from make_sample_data import make_sample_data

    return make_sample_data(tmp_path_factory.mktemp("data"), n_train=960, n_val=200, n_files=2)


def test_torch_trial_continues_from_the_signalled_batch(tmp_path: Path, data: tuple) -> None:
    import torch

    model = tmp_path / "signalling.py"
    model.write_text(f"exec(open({str(ROOT / 'examples/models/deepsets_torch.py')!r}).read())\n"
                     + SIGNALLING)
    steps = 960 // 2 // 32  # per rank and epoch: 15
    runs = {}
    for name in ("straight", "signalled"):
        folder = tmp_path / name
        folder.mkdir()
        trial = write_trial(folder, *data, model_file=str(model),
                            training={"framework": "torch", "epochs": 2, "batch_size": 32})
        runs[name] = trial
    env = payload_env()
    straight = _torchrun(runs["straight"], env)
    assert straight.returncode == 0, straight.stderr[-3000:]

    # rank 1 alone is told, in epoch 2 after its 5th batch: every rank stops after that batch
    trial = runs["signalled"]
    code_file = trial.parent / "payload_exit_code"
    env = {**env, "SIGNAL_AT": str(steps + 5), "SIGNAL_RANK": "1",
           "GRIDML_EXIT_FILE": str(code_file),
           # as the batch script exports it where Slurm warns (slurm.signal_grace): without it
           # no warning can come and the ranks skip the per-batch agreement
           "GRIDML_SIGNAL_DIR": str(trial.parent / "ranks")}
    first = _torchrun(trial, env)
    out = trial.parent / "outputs"
    assert first.returncode != 0 and code_file.read_text().strip() == "75", first.stderr[-3000:]
    assert "checkpointed in epoch 2 after batch 5" in first.stderr
    state = json.loads((out / "checkpoint" / "state.json").read_text())
    assert state["kind"] == "step" and (state["epoch"], state["batch"]) == (1, 5), state
    assert [r["epoch"] for r in _reports(out)] == [1]  # epoch 2 not reported: not over
    assert not (out / "result.json").exists()

    code_file.unlink()
    second = _torchrun(trial, payload_env())  # the next job: no signal this time
    assert second.returncode == 0, second.stderr[-3000:]
    assert "resuming in epoch 2 after its batch 5" in second.stderr
    reports, want = _reports(out), _reports(trial.parent.parent / "straight" / "outputs")
    assert [r["epoch"] for r in reports] == [1, 2]  # each epoch once, none lost
    assert reports[1]["extra"]["resumed"]["from_batch"] == 5
    assert reports[1]["extra"]["resumed"]["signal_to_training_s"] > 0
    for got, exp in zip(reports, want):  # the resumed epoch's metrics: the whole epoch's
        for k in ("loss", "accuracy", "val_loss", "val_auc"):
            assert got["metrics"][k] == pytest.approx(exp["metrics"][k], rel=1e-5, abs=1e-6), k
    a = torch.load(out / "model.pt", weights_only=False)["state_dict"]
    b = torch.load(trial.parent.parent / "straight/outputs/model.pt", weights_only=False)["state_dict"]
    assert a.keys() == b.keys()
    for k in a:
        np.testing.assert_allclose(a[k].numpy(), b[k].numpy(), rtol=1e-5, atol=1e-6, err_msg=k)
    assert json.loads((out / "result.json").read_text())["epochs"] == 2


def test_keras_trial_continues_from_the_signalled_batch(tmp_path: Path, data: tuple) -> None:
    """One rank, started as gridml starts a one-worker trial (no launcher), told from outside through the pid file the batch script reads
    ($GRIDML_SIGNAL_DIR), whenever it lands in epoch 1 or 2: the continued run's weights and
    per-epoch metrics are the uninterrupted run's (no dropout: Keras' own random layers are not
    replayed)."""
    import time

    def keras_trial(name: str) -> Path:
        folder = tmp_path / name
        folder.mkdir()
        return write_trial(folder, *data, hparams={"learning_rate": 0.003, "units": 8,
                                                    "dropout": 0.0, "activation": "relu"},
                           training={"epochs": 2, "batch_size": 8, "metrics": ["accuracy"]})

    def run(trial: Path, env: dict[str, str]) -> subprocess.Popen:
        cmd = payload_command(1, "gloo", str(trial), python=sys.executable)
        return subprocess.Popen(cmd, cwd=trial.parent, env=env, stdout=subprocess.DEVNULL,
                                stderr=open(trial.parent / "payload.log", "a"))

    straight = keras_trial("straight")
    signalled = keras_trial("signalled")
    ranks = signalled.parent / "ranks"
    env = {**payload_env(), "GRIDML_SIGNAL_DIR": str(ranks),
           "GRIDML_EXIT_FILE": str(signalled.parent / "payload_exit_code")}
    first = run(signalled, env)
    reference = run(straight, payload_env())
    progress = signalled.parent / "progress.json"  # rank 0's: written as an epoch begins
    deadline = time.monotonic() + 240
    while not (progress.exists() and list(ranks.glob("*.*"))) and first.poll() is None:
        assert time.monotonic() < deadline, (signalled.parent / "payload.log").read_text()[-3000:]
        time.sleep(0.05)
    for pid_file in ranks.glob("*.*"):  # what the batch script's trap does
        os.kill(int(pid_file.name.rsplit(".", 1)[1]), signal.SIGUSR1)
    log = signalled.parent / "payload.log"
    assert first.wait(240) == 75, log.read_text()[-3000:]  # the rank's own code, also in:
    assert (signalled.parent / "payload_exit_code").read_text().strip() == "75"
    out = signalled.parent / "outputs"
    state = json.loads((out / "checkpoint" / "state.json").read_text())
    assert state["kind"] == "step" and state["batch"] >= 1, state
    assert [r["epoch"] for r in _reports(out)] == list(range(1, state["epoch"] + 1))
    again = run(signalled, payload_env())
    assert again.wait(240) == 0, log.read_text()[-3000:]
    assert reference.wait(240) == 0, (straight.parent / "payload.log").read_text()[-3000:]
    assert f"resuming in epoch {state['epoch'] + 1} after its batch {state['batch']}" in log.read_text()
    reports, want = _reports(out), _reports(straight.parent / "outputs")
    assert [r["epoch"] for r in reports] == [1, 2]
    assert reports[state["epoch"]]["extra"]["resumed"]["from_batch"] == state["batch"]
    for got, exp in zip(reports, want):
        for k in ("loss", "accuracy", "val_loss"):
            assert got["metrics"][k] == pytest.approx(exp["metrics"][k], rel=1e-4, abs=1e-5), k

    def weights(folder: Path) -> list[np.ndarray]:
        import tensorflow as tf

        return tf.keras.models.load_model(folder / "outputs" / "model.keras", compile=False).get_weights()

    for a, b in zip(weights(signalled.parent), weights(straight.parent)):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
