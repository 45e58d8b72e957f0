"""Executors: ``create(name, ...)`` is the one place that chooses a backend (dry runs too)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gridml.data.base import DataManager
from gridml.errors import UsageError
from gridml.executors.base import Executor, TaskRequest, TaskStatus

__all__ = ["EXECUTORS", "Executor", "TaskRequest", "TaskStatus", "create"]

EXECUTORS = ("local", "panda", "phpo", "slurm", "dryrun")


def create(name: str, *, data: DataManager | None = None, journal: Path | None = None, dry_run: bool = False,
           **options: Any) -> Executor:
    """The executor ``name`` for a campaign whose data manager is ``data``; ``journal``: a folder
    where it keeps what it needs to find its tasks again after a restart. ``dry_run``: render
    what ``name`` would submit, submit nothing."""
    # each backend is imported only when chosen (PanDA's pulls in panda-client)
    if dry_run or name == "dryrun":
        from gridml.executors.dryrun import DryRunExecutor, render_local

        if name == "panda":
            from gridml.executors.panda.request import render_for_request

            return DryRunExecutor(render=render_for_request, remote=True)
        if name == "phpo":  # one task for the whole study
            from gridml.executors.panda.phpo import render_for_request as render_phpo

            return DryRunExecutor(render=render_phpo, remote=True, per_study=True)
        if name == "slurm":
            from gridml.executors.slurm.render import render_for_request as render_slurm

            return DryRunExecutor(render=render_slurm)
        return DryRunExecutor(render=render_local)
    if name == "local":
        from gridml.executors.local import LocalExecutor

        return LocalExecutor(**options)
    if name == "panda":
        from gridml.executors.panda.executor import PandaExecutor

        return PandaExecutor(data=data, journal=journal, **options)
    if name == "phpo":  # one HPO task for the whole study, followed by the campaign loop
        from gridml.executors.panda.phpo import PhpoExecutor

        return PhpoExecutor(data=data, journal=journal, **options)
    if name == "slurm":
        from gridml.executors.slurm.executor import SlurmExecutor

        return SlurmExecutor(journal=journal, **options)
    raise UsageError(f"unknown executor {name!r}", hint=f"use one of {', '.join(EXECUTORS)}")
