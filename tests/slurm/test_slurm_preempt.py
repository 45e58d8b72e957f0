"""A trial warned before its job ends, on the real Slurm cluster: the batch script asks for the
warning (``#SBATCH --signal=B:USR1@<slurm.signal_grace>``); ``scancel --batch --signal=USR1`` is
what Slurm then sends to the batch shell (the walltime warning or a preemption's, without the
wait). The shell forwards it to its ranks (torchrun's two, never torchrun), they agree on one
batch, rank 0 checkpoints mid-epoch, the job ends with exit 75 and the controller continues the
trial in a new job from that batch: no retry used (``retries: 0``), every epoch stored once, none
lost. Prints the figures of the note: signal -> checkpoint written, signal -> training again."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from tests.helpers import ROOT, gridml_json, make_registered_sample_data, start_gridml, wait_for, write_spec
from tests.slurm.slurm_fixtures import SlurmCluster
from tests.slurm.test_slurm_campaign import jobs_of, trial_logs

pytest.importorskip("torch")
pytestmark = [pytest.mark.service, pytest.mark.slow]

SLOW = ((ROOT / "examples/models/deepsets_torch.py").read_text() + "\n"  # (checked statically)
        "import time\n"
        "def training_step(model, batch, loss_fn):\n"
        "    time.sleep(0.05)\n"
        "    x, y = batch\n"
        "    out = model(x)\n"
        "    return loss_fn(out, y), out\n")


def test_a_warned_trial_continues_in_a_new_job_from_its_checkpoint(
        tmp_path: Path, gridml_home: Path, slurm_env: SlurmCluster) -> None:
    data = make_registered_sample_data(tmp_path, n_train=1280, n_val=128, files=1)
    model = tmp_path / "slow_torch.py"
    model.write_text(SLOW)
    study = "slurm-preempt"
    spec = write_spec(
        tmp_path / "spec.yaml", study, *data,
        payload=f"payload:\n  framework: torch\n  model: {model}\n",
        search="search:\n  algorithm: random\n  max_trials: 1\n  parallel: 1\n  seed: 3\n  space:\n"
               "    learning_rate: {type: real, low: 1.0e-3, high: 3.0e-2, log: true}\n",
        training="training: {epochs: 2, batch_size: 32, workers: 2}\n",
        resources="resources: {cores: 2, memory_gb: 1, walltime: 20m}\n",
        backend="backend: {executor: slurm, data: local, server: embedded, retries: 0}\n",
        slurm=f"slurm: {{partition: {slurm_env.partition}, signal_grace: 90}}\n")
    trial = gridml_home / "runs" / study / "trial-0000"
    first = trial / "attempt-1"
    proc = start_gridml("submit", str(spec), "--quiet")
    try:
        # the ranks are up (their pid files) and training has begun (rank 0's progress.json)
        wait_for(lambda: proc.poll() is not None or (
            len(list((first / "ranks").glob("*.*"))) == 2 and (trial / "progress.json").exists()),
            300, lambda: f"the ranks training: {trial_logs(study, 0)[-2000:]}", interval=0.2)
        assert proc.poll() is None, (proc.communicate()[1][-3000:], trial_logs(study, 0)[-3000:])
        assert "#SBATCH --signal=B:USR1@90" in (first / "job.sh").read_text()
        [(job, _)] = jobs_of(slurm_env, f"gridml.{study}.")[f"gridml.{study}.trial-0000"]
        subprocess.run(["scancel", "--batch", "--signal=USR1", job], check=True, timeout=60)
        out, err = proc.communicate(timeout=600)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    [t] = gridml_json("status", study)["trials"]
    assert t["state"] == "completed", (t, err[-3000:], trial_logs(study, 0)[-4000:])
    assert t["attempts"] == 2 and (trial / "continued").read_text() == "1"
    assert int((first / "exit_code").read_text()) == 75  # "continue me"
    log = trial_logs(study, 0)
    assert "[gridml] USR1: the job ends soon" in log, log[-4000:]
    assert re.search(r"resuming in epoch \d after its batch \d+", log), log[-4000:]
    epochs = gridml_json("status", study, "--trial", "0")["epochs"]
    assert [e["epoch"] for e in epochs] == [1, 2], epochs  # none lost, none twice
    resumed = [e["extra"]["resumed"] for e in epochs if "resumed" in e["extra"]]
    assert len(resumed) == 1 and resumed[0]["from_batch"] >= 1, epochs
    # the figures: from the batch shell's signal to the first job's end, to training again
    signalled = float((first / "signalled_at").read_text())
    ended = (first / "exit_code").stat().st_mtime
    again = resumed[0]["signal_to_training_s"]
    print(f"\npreemption figures (test cluster): signal -> checkpointed and job ended "
          f"{ended - signalled:.1f} s, signal -> training again {again:.1f} s (resumed in epoch "
          f"{resumed[0]['epoch']} after batch {resumed[0]['from_batch']}), epochs lost 0, "
          "duplicated 0, retries used 0")
    assert 0 < again < 600
