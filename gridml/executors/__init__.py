"""Executors: ``create(name)`` is the one place that chooses a backend."""

from __future__ import annotations

from typing import Any

from gridml.errors import UsageError
from gridml.executors.base import Executor, TaskRequest, TaskStatus

__all__ = ["Executor", "TaskRequest", "TaskStatus", "create"]


def create(name: str, **options: Any) -> Executor:
    if name == "local":
        from gridml.executors.local import LocalExecutor

        return LocalExecutor(**options)
    if name == "panda":
        from gridml.executors.panda import PandaExecutor  # type: ignore[import-not-found]

        return PandaExecutor(**options)  # type: ignore[no-any-return]
    if name == "dryrun":
        from gridml.executors.dryrun import DryRunExecutor

        return DryRunExecutor(**options)
    raise UsageError(f"unknown executor {name!r}", hint="use local, panda or dryrun")
