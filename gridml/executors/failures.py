"""Which payload failures are certain to repeat, and when failures are "the same error".

A trial that fails deterministically is not retried (:attr:`TaskStatus.deterministic`, set by
every executor from :func:`deterministic`): exit code 2 (a bad model file, trial file or spec
field: payloads/runtime/errors.py, entry.py), or an ``ImportError``/``ModuleNotFoundError``/
``SyntaxError`` in the model file, whatever the code. A trial lost to the infrastructure, killed,
out of memory or failing on its data (exit 3: a bad replica may be fetched again) is not.

The controller stops a campaign once ``backend.max_same_failures`` trials have failed with the
same error (:func:`repeated_failure`): the errors are compared by :func:`signature`, their first
line with the numbers, paths and job ids taken out.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable

from gridml.executors.logs import _failed_rank, last_error_line

OWN = "gridml payload error:"
DETERMINISTIC_CODES = (2,)
# errors that no rerun changes: the model file cannot be imported or compiled
_IMPORT = re.compile(r"\b(ModuleNotFoundError|ImportError|SyntaxError|IndentationError)\b")
# what the payload says on exit 2, for a log with no exit code in it (PanDA's log tarball)
_CODE2 = re.compile(r"^(model file |training\.[a-z_]+|data\.(inputs|weights)\b|\S+trial\.json"
                    r"(:\d+)?: |\S+: training\.framework )")
# the launcher's or the pilot wrapper's word on the exit code (PanDA: the log tarball)
_SAID_CODE = re.compile(r"payload exited with (?:code )?(\d+)")


def effective_code(code: int | None, log_tail: str) -> int | None:
    """The payload's own exit code: the failing rank's where the launcher names it (horovodrun
    exits 1 whatever its rank's code was), else ``code``, else the one the log states."""
    rank = _failed_rank(log_tail)
    if rank is not None and rank[1] > 0 and (code is None or code == 1):
        return rank[1]
    if code is not None:
        return code
    said = _SAID_CODE.findall(log_tail)
    return int(said[-1]) if said else None


def deterministic(code: int | None, log_tail: str) -> bool:
    """Whether a failed payload (exit ``code``, None when unknown; its log's last lines) would
    fail the same way if run again: see the module docstring."""
    why = last_error_line(log_tail)
    if _IMPORT.search(why):
        return True
    if effective_code(code, log_tail) in DETERMINISTIC_CODES:
        return True
    if code is None and OWN in why:  # no exit code known: the payload's own words on exit 2
        return bool(_CODE2.match(why.split(OWN, 1)[1].strip()))
    return False


_PATH = re.compile(r"(?:[A-Za-z]:)?(?:[\w.~+-]*/)+[\w.+-]*")
_HEX = re.compile(r"\b(?:0x)?[0-9a-f]{8,}\b", re.I)
_NUM = re.compile(r"\d+(?:\.\d+)?(?:e[-+]?\d+)?", re.I)
# what a backend puts before the payload's words: "Slurm job 12 FAILED on c1: ", "PanDA task ..."
_PREFIX = re.compile(r"^(?:Slurm job \S+ [A-Z_]+(?: on \S+)?: |PanDA task \S+ is \w+\S*\s*)")


def signature(error: str | None) -> str:
    """The error's identity across trials: its first line (the payload's own words when it
    gave them), without the backend's job name, paths, numbers and ids."""
    lines = (error or "").strip().splitlines()
    first = lines[0] if lines else ""
    if OWN in first:
        first = first.split(OWN, 1)[1]
    first = _PREFIX.sub("", first.strip())
    first = _PATH.sub("<path>", first)
    first = _HEX.sub("<id>", first)
    first = _NUM.sub("N", first)
    return " ".join(first.split())[:300]


def repeated_failure(errors: Iterable[str | None], limit: int) -> tuple[str, int] | None:
    """(the first line of the error, how many trials failed with it) when ``limit`` or more of
    the failed trials' ``errors`` share one :func:`signature`, the most frequent first (its
    first occurrence names it); else None."""
    counts: Counter[str] = Counter()
    first: dict[str, str] = {}
    for error in errors:
        sig = signature(error)
        if sig:
            counts[sig] += 1
            first.setdefault(sig, (error or "").strip().splitlines()[0])
    if not counts:
        return None
    sig, n = counts.most_common(1)[0]
    return (first[sig], n) if n >= limit else None
