"""The one log-tail reader of the backends: the last lines of a payload's log, and its last words.

Local and Slurm trials leave ``payload.log`` in their attempt folder (:func:`tail`); a PanDA job's
log comes back inside its log tarball (:func:`tail_of_text` over the member read from it). What
the controller stores as the trial's error is :func:`last_error_line` of that tail.
"""

from __future__ import annotations

import re
from pathlib import Path

LINES = 30  # what a failed trial's error keeps of its log


def tail_of_text(text: str, lines: int = LINES) -> str:
    """The last ``lines`` lines of ``text``."""
    return "\n".join(text.splitlines()[-lines:])


def tail(path: Path, lines: int = LINES) -> str:
    """The last ``lines`` lines of the log at ``path``; '' when there is none."""
    try:
        return tail_of_text(path.read_text(errors="replace"), lines)
    except OSError:
        return ""


_NOISE = re.compile(r"^\[\d+\]<(stdout|stderr)>:|^\s*$")


def last_error_line(log_tail: str) -> str:
    """The payload's last words (horovodrun's [rank]<stream>: prefixes removed); the payload's
    own ``gridml payload error:`` line first (torchrun prints its failure summary after it)."""
    for line in reversed(log_tail.splitlines()):
        if "gridml payload error:" in line:
            return _NOISE.sub("", line).strip()[:300]
    for line in reversed(log_tail.splitlines()):
        text = _NOISE.sub("", line).strip()
        if text and "tensorflow/core" not in text and not text.startswith("To enable the following"):
            return text[:300]
    return ""
