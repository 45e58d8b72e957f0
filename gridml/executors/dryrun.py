"""Dry-run executor: renders what would be submitted and submits nothing."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from gridml.executors.base import TaskRequest, TaskStatus
from gridml.planner import local_payload_command


def render_local(req: TaskRequest) -> dict[str, Any]:
    """What the local executor would run for ``req``."""
    return {"executor": "local", "trial": req.trial_number, "cwd": str(req.workdir),
            "command": local_payload_command(req), "trial_file": str(req.trial_file),
            "cores": req.cores, "gpus": req.gpus, "walltime_s": req.walltime_s}


class DryRunExecutor:
    name = "dryrun"
    remote = False
    watch_heartbeats = True

    def __init__(self, render: Callable[[TaskRequest], dict[str, Any]] = render_local,
                 remote: bool = False) -> None:
        self.render = render
        self.remote = remote  # rendering for a remote executor: inputs are not staged here
        self.watch_heartbeats = not remote  # as the executor it renders for
        self.rendered: list[dict[str, Any]] = []
        self._handles: set[str] = set()
        self._killed: set[str] = set()

    def submit(self, req: TaskRequest) -> str:
        handle = f"dryrun:{req.trial_id}:{req.attempt}"
        if handle not in self._handles:  # idempotent per attempt, like every executor
            self._handles.add(handle)
            self.rendered.append(self.render(req))
        return handle

    def poll(self, handle: str) -> TaskStatus:
        if handle in self._killed:
            return TaskStatus("killed", "dry run: killed before anything was submitted")
        return TaskStatus("submitted", "dry run: nothing was submitted")

    def kill(self, handle: str) -> None:
        self._killed.add(handle)

    def close(self) -> None:
        return None

    def dumps(self) -> str:
        return json.dumps(self.rendered, indent=2, sort_keys=True)
