"""Run tasks over a process pool (or in this process for -j 1) with a live progress bar.

Workers are forked before the progress display starts (no thread is running when they fork) and
every task returns a plain dict, so nothing unpicklable crosses the process boundary. The first
task that reports ``{"error": ...}`` stops the run: queued tasks are cancelled.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from contextlib import nullcontext
from typing import Any

from gridml.errors import DataError

Task = Any
Result = dict[str, Any]


def default_jobs() -> int:
    """All the cores this process may use."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def _pid(_: int) -> int:
    return os.getpid()


def _die_with_parent(parent: int) -> None:
    """Worker initializer: exit when the parent dies, even by SIGKILL (no orphans left behind)."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG (Linux)
    except (OSError, AttributeError):  # not Linux: watch the parent from a thread instead
        import threading

        def watch() -> None:
            while os.getppid() == parent:
                time.sleep(1.0)
            os._exit(1)

        threading.Thread(target=watch, daemon=True).start()
    if os.getppid() != parent:  # it died before the line above took effect
        os._exit(1)


class Pool:
    """``jobs`` worker processes (none when jobs == 1), kept for both stages of a run."""

    def __init__(self, jobs: int) -> None:
        self.jobs = jobs if jobs > 0 else default_jobs()
        self._ex: ProcessPoolExecutor | None = None

    def __enter__(self) -> Pool:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._ex is not None:
            self._ex.shutdown(wait=True, cancel_futures=True)

    def start(self) -> None:
        """Fork the workers now (call before any thread, e.g. the progress display, starts)."""
        if self.jobs > 1 and self._ex is None:
            ctx = multiprocessing.get_context("fork")
            self._ex = ProcessPoolExecutor(max_workers=self.jobs, mp_context=ctx,
                                           initializer=_die_with_parent,
                                           initargs=(os.getpid(),))
            list(self._ex.map(_pid, range(self.jobs)))  # all workers up

    def run(self, fn: Callable[[Task], Result], tasks: Sequence[Task]) -> Iterator[Result]:
        """Yield results as they complete; stop at the first error result."""
        if self.jobs == 1 or len(tasks) <= 1 or self._ex is None:
            for task in tasks:
                yield fn(task)
            return
        ahead = 2 * self.jobs  # bounded queue: results and tasks never pile up
        queue = list(reversed(tasks))
        running: dict[Future[Result], Task] = {}
        while queue or running:
            while queue and len(running) < ahead:
                task = queue.pop()
                running[self._ex.submit(fn, task)] = task
            done, _ = wait(running, return_when=FIRST_COMPLETED)
            for fut in done:
                if isinstance(fut.exception(), BrokenProcessPool):
                    raise _died(list(running.values()))
                running.pop(fut)
                yield fut.result()


def _died(in_flight: list[Task]) -> DataError:
    """A worker died (killed, out of memory, crashed in C): name what was in flight."""
    labels = [_label(t) for t in in_flight]
    return DataError(f"a worker process died while working on {labels[0]}"
                     + (f" or one of {labels[1:]}" if len(labels) > 1 else ""),
                     hint="out of memory? lower inputs.chunk_size or -j; else the input or a "
                          "compiled library crashed: try -j 1 to see the error")


def _label(task: Task) -> str:
    if hasattr(task, "chunk"):
        return f"{task.source}: chunk {task.chunk} (events {task.start}-{task.stop})"
    if isinstance(task, dict) and "name" in task:
        return f"shard {task['name']}"
    return str(task[0] if isinstance(task, tuple) else task)


def progress(enabled: bool) -> Any:
    """A rich progress display (events/s, ETA), or a do-nothing stand-in."""
    if not enabled:
        return nullcontext(_Quiet())
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        ProgressColumn,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )
    from rich.text import Text

    class Rate(ProgressColumn):
        def render(self, task: Any) -> Text:
            speed = task.finished_speed or task.speed
            unit = task.fields.get("unit", "events")
            return Text(f"{speed:,.0f} {unit}/s" if speed else f"- {unit}/s", style="cyan")

    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), Rate(),
                    TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn())


class _Quiet:
    def add_task(self, *args: Any, **kwargs: Any) -> int:
        return 0

    def update(self, *args: Any, **kwargs: Any) -> None:
        return None
