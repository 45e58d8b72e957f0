"""Executors: ``create(name, ...)`` makes the executor of a per-trial backend (dry runs too).

``phpo`` is no executor: iDDS proposes the points and the study is one PanDA task, followed by a
study driver (:mod:`gridml.phpo.driver`); :mod:`gridml.assemble` chooses between the two."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gridml.data.base import DataManager
from gridml.errors import UsageError
from gridml.executors.base import Executor, TaskRequest, TaskStatus

__all__ = ["EXECUTORS", "Executor", "TaskRequest", "TaskStatus", "create"]

EXECUTORS = ("local", "panda", "slurm", "dryrun")  # (and phpo, a study driver: gridml.assemble)


def create(name: str, *, data: DataManager | None = None, journal: Path | None = None, dry_run: bool = False,
           **options: Any) -> Executor:
    """The executor ``name`` for a campaign whose data manager is ``data``; ``journal``: a folder
    where it keeps what it needs to find its tasks again after a restart. ``dry_run``: render
    what ``name`` would submit, submit nothing."""
    if name == "phpo":
        raise UsageError("backend.executor phpo is a study driver (iDDS proposes the points), "
                         "not a per-trial executor", hint="build its campaign with gridml.assemble")
    # each backend is imported only when chosen (PanDA's pulls in panda-client)
    if dry_run or name == "dryrun":
        from gridml.executors.dryrun import DryRunExecutor, render_local

        if name == "panda":
            from gridml.executors.panda.request import render_for_request

            return DryRunExecutor(render=render_for_request, remote=True)
        if name == "slurm":
            from gridml.executors.slurm.render_pack import render_for_request as render_slurm

            return DryRunExecutor(render=render_slurm)
        return DryRunExecutor(render=render_local)
    if name == "local":
        from gridml.executors.local import LocalExecutor

        return LocalExecutor(**options)
    if name == "panda":
        from gridml.executors.panda.executor import PandaExecutor

        return PandaExecutor(data=data, journal=journal, **options)
    if name == "slurm":
        from gridml.executors.slurm.executor import SlurmExecutor

        return SlurmExecutor(journal=journal, **options)
    raise UsageError(f"unknown executor {name!r}", hint=f"use one of {', '.join(EXECUTORS)}")
