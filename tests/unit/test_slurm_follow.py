"""How packed steps and array tasks are judged (gridml/executors/slurm/follow.py, pack.py): the
same continuation rules as one job per trial. A packed step that exits 75, or whose own walltime
or whose allocation's walltime ends it after the trial checkpointed, is continued (no retry used,
``backend.max_continuations``); without a checkpoint an allocation's end is the infrastructure's.
The grouped handles survive a controller restart. Pure: no Slurm here (the paths that need it run
on the test cluster: tests/slurm/test_slurm_pack.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gridml.errors import ExecutorError
from gridml.executors.base import TaskStatus
from gridml.executors.slurm import journal
from gridml.executors.slurm.cli import JobInfo
from gridml.executors.slurm.follow import Handles, left_queue, trial_status
from gridml.executors.slurm.pack import Allocation, Packer, allocation_ended
from payloads.runtime.errors import CONTINUE_CODE
from tests.unit.test_script_fields import slurm_request


def attempt(tmp_path: Path, checkpoint: bool) -> Path:
    run = tmp_path / "trial-0000" / "attempt-1"
    run.mkdir(parents=True)
    if checkpoint:
        ckpt = run.parent / "outputs" / "checkpoint"
        ckpt.mkdir(parents=True)
        (ckpt / "state.json").write_text('{"epoch": 1, "batch": 3, "name": "step-2-3"}')
    return run


@pytest.mark.parametrize("state, checkpoint, continued, infrastructure", [
    ("TIMEOUT", True, True, False),     # the allocation's walltime after a checkpoint: continued
    ("TIMEOUT", False, False, True),    # nothing saved: lost to the infrastructure, as before
    ("PREEMPTED", True, False, True),   # preempted: infrastructure (it resumes from the checkpoint)
    ("NODE_FAIL", True, False, True),
])
def test_a_step_whose_allocation_ended(tmp_path: Path, state: str, checkpoint: bool,
                                       continued: bool, infrastructure: bool) -> None:
    run = attempt(tmp_path, checkpoint)
    status = allocation_ended("step s of allocation 9", state, run)
    assert status.state == "failed"
    assert status.continuation is continued and status.infrastructure is infrastructure, status
    if continued:
        assert "after the trial checkpointed: continued" in status.message, status.message


def test_a_packed_step_timed_out_with_its_allocation_is_continued(tmp_path: Path) -> None:
    """The packer's own path: the step's allocation is gone TIMEOUT (as squeue told), the step
    left no exit code and its srun is over: continued, no Slurm command needed to say so."""
    run = attempt(tmp_path, checkpoint=True)
    packer = Packer(None)
    packer._allocs["9"] = Allocation("9", "shape", tmp_path, 2, state="TIMEOUT", gone=True)
    entry = {"step": "gridml.fields.trial-0000.a1", "started_at": 1.0}
    status = packer._step_status("k", entry, run, "9")
    assert status.continuation and not status.infrastructure, status
    (run / "exit_code").write_text(f"{CONTINUE_CODE}\n")  # the step checkpointed on the warning
    status = packer._step_status("k", entry, run, "9")
    assert status.continuation and "left to be continued" in status.message, status
    (run / "exit_code").write_text("0\n")
    assert packer._step_status("k", entry, run, "9").state == "completed"


def test_a_steps_own_timeout_is_judged_as_a_jobs(tmp_path: Path) -> None:
    """sacct's record of the step (its srun --time ended it): continued after a checkpoint,
    else a failure that uses a retry, as one job per trial."""
    run = attempt(tmp_path, checkpoint=False)
    info = JobInfo("9.3", "TIMEOUT", nodes="n1", exit_code="0:15", name="gridml.s.trial-0000.a1")
    status = trial_status(info, run)
    assert status.state == "failed" and not status.continuation and not status.infrastructure
    (run.parent / "outputs" / "checkpoint").mkdir(parents=True)
    (run.parent / "outputs" / "checkpoint" / "state.json").write_text("{}")
    assert trial_status(info, run).continuation
    assert trial_status(JobInfo("9.3", "FAILED", exit_code="75:0"), run).continuation


def test_exit_codes_of_work_that_left_the_queue(tmp_path: Path) -> None:
    run = attempt(tmp_path, checkpoint=False)
    assert "keeps no accounting" in left_queue("Slurm array task 5_1", run).message
    (run / "exit_code").write_text("2\n")
    (run / "payload.log").write_text("gridml payload error: model file m.py failed to import\n")
    status = left_queue("Slurm array task 5_1", run)
    assert status.state == "failed" and status.deterministic, status  # as one job per trial
    (run / "exit_code").write_text(f"{CONTINUE_CODE}\n")
    assert left_queue("Slurm array task 5_1", run).continuation


def test_grouped_handles_are_found_again_after_a_restart(tmp_path: Path) -> None:
    req = slurm_request(tmp_path, site={"pack": 2})
    handles = Handles("slurm-pack:", tmp_path / "journal" / "pack")
    key, known = handles.add(req, "pack")
    assert key == "fields.trial-0000.a1" and known is None  # a fresh attempt
    journal.update_attempt(req.workdir, req.attempt, pack="abc")
    again = Handles("slurm-pack:", tmp_path / "journal" / "pack")  # a restarted controller
    assert again.locate(key) == (req.workdir, 1)
    assert again.add(req, "pack")[1] is not None  # taken in already: not queued twice
    journal.update_attempt(req.workdir, req.attempt, killed=1.0)
    assert again.add(req, "pack")[1] is None  # a killed attempt is submitted afresh
    with pytest.raises(ExecutorError, match="slurm-pack:other: not in this executor's journal"):
        again.locate("other")
    assert again.find("other") is None
    # a verdict "lost" stands: the work was cancelled on it, its later CANCELLED is not news
    assert again.settle(key, TaskStatus("failed", "x")).state == "failed" and again.lost(key) is None
    lost = TaskStatus("failed", "node n2 was lost under it", infrastructure=True)
    again.settle(key, lost)
    assert again.lost(key) is lost
