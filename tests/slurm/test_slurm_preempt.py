"""A trial warned before its job ends, on the real Slurm cluster: the batch script asks for the
warning (``#SBATCH --signal=B:USR1@<slurm.signal_grace>``); ``scancel --batch --signal=USR1`` is
what Slurm then sends to the batch shell (the walltime warning or a preemption's, without the
wait). The shell forwards it to its ranks (torchrun's two, never torchrun), they agree on one
batch, rank 0 checkpoints mid-epoch, the job ends with exit 75 and the controller continues the
trial in a new job from that batch: no retry used (``retries: 0``), every epoch stored once, none
lost. Prints the figures of the note: signal -> checkpoint written, signal -> training again.

Beside it, in the same run, a second campaign hits a real walltime with no warning: a 1-core
trial with ``walltime: 1m`` (the shortest Slurm has) and ``signal_grace: 0`` checkpoints every
epoch (``training.options.checkpoint``, on by default) and trains slowly in its first job only,
so Slurm ends that job TIMEOUT mid-training (slurmctld checks time limits every 30 s: 60-91 s
after the start, then SIGTERM, SIGKILL after KillWait); the controller continues the trial in a
new job from its last epoch checkpoint (``it hit its walltime after a checkpoint``): no retry
used, every epoch stored once, the trial completed. Both campaigns run at once, so the walltime
one adds only what it lasts past the warned one."""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path

import pytest

from tests.helpers import ROOT, gridml_json, make_registered_sample_data, start_gridml, wait_for, write_spec
from tests.slurm.slurm_fixtures import SlurmCluster
from tests.slurm.test_slurm_campaign import controller_log, jobs_of, trial_logs

pytest.importorskip("torch")
pytestmark = [pytest.mark.service, pytest.mark.slow]

SLOW = ((ROOT / "examples/models/deepsets_torch.py").read_text() + "\n"  # (checked statically)
        "import time\n"
        "def training_step(model, batch, loss_fn):\n"
        "    time.sleep(0.05)\n"
        "    x, y = batch\n"
        "    out = model(x)\n"
        "    return loss_fn(out, y), out\n")

# The walltime trial: slow (0.5 s a batch, 5 s an epoch of 10 batches) in its first Slurm job only,
# fast in the job that continues it. The first job that imports the model records its id.
WALLTIME_EPOCHS = 20  # 100 s of training in the first job: past the latest TIMEOUT (~91 s)
PAST_WALLTIME = ((ROOT / "examples/models/deepsets_torch.py").read_text() + "\n"
                 "import os as _os\n"
                 "import time as _time\n"
                 "from pathlib import Path as _Path\n"
                 "_FIRST = _Path(@MARKER@)\n"
                 "_JOB = _os.environ.get('SLURM_JOB_ID', '')\n"
                 "if _JOB and not _FIRST.exists():\n"
                 "    _FIRST.write_text(_JOB)\n"
                 "_SLOW = bool(_JOB) and _FIRST.exists() and _FIRST.read_text() == _JOB\n"
                 "def training_step(model, batch, loss_fn):\n"
                 "    if _SLOW:\n"
                 "        _time.sleep(0.5)\n"
                 "    x, y = batch\n"
                 "    out = model(x)\n"
                 "    return loss_fn(out, y), out\n")


def start_past_walltime(tmp_path: Path, data: tuple[str, str], slurm_env: SlurmCluster,
                        study: str) -> subprocess.Popen[str]:
    """The campaign of one trial that outlives its 1-minute walltime, unwarned."""
    model = tmp_path / "walltime_torch.py"
    model.write_text(PAST_WALLTIME.replace("@MARKER@", repr(str(tmp_path / "first_job"))))
    spec = write_spec(
        tmp_path / "walltime.yaml", study, *data,
        payload=f"payload:\n  framework: torch\n  model: {model}\n",
        search="search:\n  algorithm: random\n  max_trials: 1\n  parallel: 1\n  seed: 5\n  space:\n"
               "    learning_rate: {type: real, low: 1.0e-3, high: 3.0e-2, log: true}\n",
        training=f"training: {{epochs: {WALLTIME_EPOCHS}, batch_size: 128, workers: 1}}\n",
        resources="resources: {cores: 1, memory_gb: 1, walltime: 1m}\n",
        backend="backend: {executor: slurm, data: local, server: embedded, retries: 0}\n",
        slurm=f"slurm: {{partition: {slurm_env.partition}, signal_grace: 0}}\n")
    return start_gridml("submit", str(spec), "--quiet")


def check_past_walltime(gridml_home: Path, slurm_env: SlurmCluster, study: str, err: str,
                        seconds: float) -> None:
    """The trial's first job ended TIMEOUT mid-training, a second one finished it from the
    last epoch checkpoint: no retry used, each epoch stored once."""
    [t] = gridml_json("status", study)["trials"]
    log = trial_logs(study, 0)
    assert t["state"] == "completed", (t, err[-3000:], log[-4000:], controller_log(study)[-3000:])
    trial = gridml_home / "runs" / study / "trial-0000"
    assert "--signal" not in (trial / "attempt-1" / "job.sh").read_text()  # signal_grace: 0
    [(first, first_state), (_, second_state)] = jobs_of(slurm_env, f"gridml.{study}.")[
        f"gridml.{study}.trial-0000"]
    assert (first_state, second_state) == ("TIMEOUT", "COMPLETED"), jobs_of(slurm_env, "gridml.")
    # continued, not retried (retries: 0 would have failed it): 2 attempts, 1 continuation
    assert t["attempts"] == 2 and (trial / "continued").read_text() == "1", t
    assert "it hit its walltime after a checkpoint" in controller_log(study) + err
    resumed = re.search(r"resuming after epoch (\d+) from", log)
    assert resumed and 1 <= int(resumed[1]) < WALLTIME_EPOCHS, log[-4000:]
    # the first job was killed in the epoch after its last report, not between jobs' epochs
    first_log = (trial / "attempt-1" / "payload.log").read_text(errors="replace")
    assert re.findall(r"\] epoch (\d+): ", first_log)[-1] == resumed[1], first_log[-3000:]
    epochs = gridml_json("status", study, "--trial", "0")["epochs"]
    assert [e["epoch"] for e in epochs] == list(range(1, WALLTIME_EPOCHS + 1)), epochs
    elapsed = slurm_env._cmd("sacct", "-X", "-n", "-P", "-j", first, "-o", "Elapsed").split()
    print(f"\nwalltime figures (test cluster): walltime 1m, no warning; job {first} ended TIMEOUT "
          f"after {elapsed[0] if elapsed else '?'} with {resumed[1]} of {WALLTIME_EPOCHS} epochs "
          f"checkpointed, continued in a new job from there and completed: campaign {seconds:.0f} s, "
          "epochs lost 0, duplicated 0, retries used 0")


def test_a_warned_trial_continues_in_a_new_job_from_its_checkpoint(
        tmp_path: Path, gridml_home: Path, slurm_env: SlurmCluster) -> None:
    data = make_registered_sample_data(tmp_path, n_train=1280, n_val=128, files=1)
    model = tmp_path / "slow_torch.py"
    model.write_text(SLOW)
    study = "slurm-preempt"
    late_study = "slurm-walltime"
    t0 = time.monotonic()
    late = start_past_walltime(tmp_path, data, slurm_env, late_study)
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
        warned_s = time.monotonic() - t0
        _, late_err = late.communicate(timeout=600)
        late_s = time.monotonic() - t0
    finally:
        for p in (proc, late):
            if p.poll() is None:
                p.kill()
                p.wait()
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
    check_past_walltime(gridml_home, slurm_env, late_study, late_err, late_s)
    print(f"the two campaigns at once: warned {warned_s:.0f} s, past its walltime {late_s:.0f} s")
