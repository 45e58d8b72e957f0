"""Open-file limits against a campaign's input files, checked at ``gridml validate``/``submit``.

The payload holds at most ``data.max_open_files`` input files open per process (default: sized
from the soft ``RLIMIT_NOFILE``, which it raises to the hard limit first; see
payloads/runtime/pipeline/h5source.py and docs/data.md "Many files"), so a dataset of any size
fits any sane limit. What cannot work is known here, on the submit host, for the executors that
run trials under this host's limits (``local``; ``slurm``, which propagates the submitting
shell's limits to the job by default): a ``data.max_open_files`` above what the hard limit
allows beside the framework's own descriptors, or a hard limit too small for any input file.
"""

from __future__ import annotations

import resource
from collections.abc import Callable
from typing import Any

# descriptors left to the framework (sockets, pipes, shared memory, libraries): the payload's
# default bound keeps max(FRAMEWORK_ROOM, soft // 4) (h5source.default_max_open)
FRAMEWORK_ROOM = 128
MIN_OPEN = 8  # h5source.MIN_OPEN
SURE_ROOM = 64  # descriptors a trial surely needs beside its input files (validate's check)
HOST_LIMITED = ("local", "slurm")  # executors whose trials run under this host's limits


def nofile_limits() -> tuple[int, int]:
    """(soft, hard) RLIMIT_NOFILE of this process (unlimited: 2**20, Linux's usual nr_open)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    inf = resource.RLIM_INFINITY
    return (1 << 20 if soft == inf else int(soft)), (1 << 20 if hard == inf else int(hard))


def open_files_problem(files: int, max_open_files: int | None, hard: int) -> tuple[str, str] | None:
    """(field, message) when a payload under the hard limit ``hard`` cannot hold the input files
    it would open at once (``files`` input files in all splits), else None. The framework is
    given ``SURE_ROOM`` descriptors here: a limit flagged is certain to fail."""
    room = hard - SURE_ROOM
    fix = f"raise the limit (ulimit -n {max(4096, 2 * hard)} where the trials run)"
    if max_open_files:
        if min(files, max_open_files) <= room:
            return None
        return ("max_open_files",
                f"{max_open_files} input files open does not fit the open-files limit here "
                f"(hard limit {hard}, of which ~{SURE_ROOM} are the framework's): "
                + (f"set it to {room} or less, or leave it out, or {fix}" if room >= 1 else fix))
    if min(files, MIN_OPEN) <= room:
        return None
    return ("train", f"the open-files limit here (hard limit {hard}) leaves no room for the "
                     f"{files} input files beside the framework's ~{SURE_ROOM} descriptors: {fix}")


def check_open_files(spec: Any, exists: Callable[[str], bool]) -> list[tuple[tuple[str, ...], str]]:
    """The spec's input files fit the payload's open-files bound under this host's limit;
    ``exists``: a data manager's bound ``exists`` (its manager counts the DIDs' files)."""
    if spec.backend.executor not in HOST_LIMITED:
        return []
    _soft, hard = nofile_limits()
    max_open = getattr(spec.data, "max_open_files", None)
    if hard - SURE_ROOM >= (max_open or MIN_OPEN):
        return []  # fits whatever the file count: nothing to look up
    dm = getattr(exists, "__self__", None)
    files = 0
    for which in ("train", "validation", "test"):
        for did in spec.data.dids(which):
            try:
                files += len(dm.list_files(did)) if dm is not None else 1
            except Exception:  # not found / unreachable: check_dids says so
                files += 1
    problem = open_files_problem(files, max_open, hard)
    return [] if problem is None else [(("data", problem[0]), problem[1])]
