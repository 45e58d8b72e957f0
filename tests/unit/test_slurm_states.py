"""Slurm job states -> trial states (gridml/executors/slurm/executor.py ``trial_status``), for
the states the test cluster cannot produce (OUT_OF_MEMORY: no cgroup memory limit in its
namespaces) and the requeue rule (the same attempt, no retry used)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gridml.executors.slurm.cli import JobInfo
from gridml.executors.slurm.executor import trial_status


@pytest.mark.parametrize("state, trial, infrastructure, words", [
    ("OUT_OF_MEMORY", "failed", False, "ran out of memory (raise resources.memory_gb)"),
    ("TIMEOUT", "failed", False, "hit its walltime"),
    ("PREEMPTED", "failed", True, "it was preempted, not the payload; resubmitted without using a retry"),
    ("NODE_FAIL", "failed", True, "a node of the job failed"),
    ("REQUEUED", "submitted", False, "Slurm requeued it; followed as the same attempt"),
    ("REQUEUE_FED", "submitted", False, "followed as the same attempt"),
    ("COMPLETED", "completed", False, "COMPLETED on n1"),
])
def test_job_states(tmp_path: Path, state: str, trial: str, infrastructure: bool, words: str) -> None:
    status = trial_status(JobInfo("42", state, nodes="n1", restarts=1), tmp_path)
    assert status.state == trial and status.infrastructure is infrastructure
    assert status.message.startswith(f"Slurm job 42 {state}") and words in status.message, status.message
