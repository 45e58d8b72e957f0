"""Continuations on Slurm: the batch script's warning (``--signal=B:USR1@<slurm.signal_grace>``,
its trap and background launcher) and how the executor reads a job that left to be continued
(exit 75, or TIMEOUT after a checkpoint): no retry used (``TaskStatus.continuation``). The
signal's path itself runs on the real cluster (tests/slurm/test_slurm_preempt.py)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from gridml.executors.slurm.cli import JobInfo
from gridml.executors.slurm.executor import trial_status
from gridml.executors.slurm.render import render_script
from gridml.specmodel.model import Slurm
from payloads.runtime.errors import CONTINUE_CODE
from test_script_fields import slurm_request


@pytest.mark.parametrize("grace, walltime, want", [
    (None, 3600, "--signal=B:USR1@120"),   # the default
    ("5m", 3600, "--signal=B:USR1@300"),
    (0, 3600, None),                       # no warning: the script as before
    (900, 600, "--signal=B:USR1@300"),     # at most half the walltime
])
def test_the_warning_is_asked_for(tmp_path: Path, grace: object, walltime: int,
                                  want: str | None) -> None:
    site = {} if grace is None else {"signal_grace": grace}
    text = render_script(slurm_request(tmp_path, site=site, walltime_s=walltime),
                         tmp_path / "trial.json", "/env/bin")
    if want is None:
        assert "--signal" not in text and "trap" not in text and "gridml_run" not in text
    else:
        assert f"#SBATCH {want}\n" in text and "trap gridml_warned USR1" in text
        assert "\ngridml_run python -m payloads.train_keras " in text  # one worker: no launcher
        assert "GRIDML_EXIT_FILE=" in text


def test_signal_grace_is_checked() -> None:
    assert Slurm(signal_grace="2m").signal_grace_s == 120
    for bad in ("soon", -1, 70000):
        with pytest.raises(ValueError):
            Slurm(signal_grace=bad)


def test_the_trap_tells_the_ranks_not_the_launcher(tmp_path: Path) -> None:
    """The script's own lines in bash: USR1 to the shell reaches the 'rank' that advertised its
    pid, the 'launcher' (this shell's background child) lives on, and the script then gets the
    rank's code."""
    text = render_script(slurm_request(tmp_path), tmp_path / "trial.json", "/env/bin")
    lines = text.splitlines()
    start = lines.index("# Slurm's warning before the job ends (slurm.signal_grace): to the ranks")
    block = "\n".join(lines[start:lines.index("trap gridml_warned USR1") + 1])
    (tmp_path / "rank.sh").write_text(
        "trap 'echo warned > got; exit 75' USR1\n"
        'echo > "$GRIDML_SIGNAL_DIR/$SLURMD_NODENAME.$$"\n'
        "while :; do sleep 0.05; done\n")
    (tmp_path / "launcher.sh").write_text("bash rank.sh\necho launcher-saw $? > launcher\n")
    script = f"cd {tmp_path}\nexport SLURMD_NODENAME=n1\n{block}\ngridml_run bash launcher.sh\necho $? > code\n"
    proc = subprocess.Popen(["bash", "-c", script])
    import time

    deadline = time.monotonic() + 30
    while not list((tmp_path / "ranks").glob("n1.*")):
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.02)
    proc.send_signal(10)  # SIGUSR1, as Slurm sends it to the batch shell
    assert proc.wait(30) == 0
    assert (tmp_path / "got").read_text().strip() == "warned"
    assert (tmp_path / "launcher").read_text().strip() == "launcher-saw 75"  # not killed by it
    assert (tmp_path / "code").read_text().strip() == "0"
    assert (tmp_path / "signalled_at").exists() and (tmp_path / "ranks" / "warned").exists()


def test_exit_75_and_timeout_after_a_checkpoint_are_continued(tmp_path: Path) -> None:
    run = tmp_path / "trial-0000" / "attempt-1"
    run.mkdir(parents=True)
    (run / "exit_code").write_text(f"{CONTINUE_CODE}\n")
    status = trial_status(JobInfo("7", "FAILED", nodes="n1"), run)
    assert status.continuation and not status.infrastructure and "left to be continued" in status.message
    (run / "exit_code").unlink()  # only accounting knows: sacct's "75:0"
    assert trial_status(JobInfo("7", "FAILED", nodes="n1", exit_code="75:0"), run).continuation
    assert not trial_status(JobInfo("7", "FAILED", nodes="n1", exit_code="1:0"), run).continuation
    assert not trial_status(JobInfo("7", "TIMEOUT", nodes="n1"), run).continuation  # nothing saved
    ckpt = run.parent / "outputs" / "checkpoint"
    ckpt.mkdir(parents=True)
    (ckpt / "state.json").write_text('{"epoch": 1, "name": "epoch-1"}')
    status = trial_status(JobInfo("7", "TIMEOUT", nodes="n1"), run)
    assert status.continuation and "walltime after a checkpoint" in status.message
