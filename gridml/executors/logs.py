"""The one log-tail reader of the backends: the last lines of a payload's log, and its last words.

Local and Slurm trials leave ``payload.log`` in their attempt folder (:func:`tail`); a PanDA job's
log comes back inside its log tarball (:func:`tail_of_text` over the member read from it). What
the controller stores as the trial's error is :func:`last_error_line` of that tail.
"""

from __future__ import annotations

import re
import signal
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
_RULE = re.compile(r"^[=\-_*#~. ]*$")  # a ruler line (torchrun's summary: ======, ------)


def last_error_line(log_tail: str) -> str:
    """The payload's last words (horovodrun's [rank]<stream>: prefixes removed); the payload's
    own ``gridml payload error:`` line first (torchrun prints its failure summary after it)."""
    for line in reversed(log_tail.splitlines()):
        if "gridml payload error:" in line:
            return _NOISE.sub("", line).strip()[:300]
    for line in reversed(log_tail.splitlines()):
        text = _NOISE.sub("", line).strip()
        if text and not _RULE.match(text) and "tensorflow/core" not in text \
                and not text.startswith("To enable the following"):
            return text[:300]
    return ""


# the payload's own exit codes (payloads/train_torch.py, train_keras.py): each with its own
# "gridml payload error:" line; any other code, or one without that line, is the model file's
_PAYLOAD_CODES = (1, 2, 3, 130)
# torchrun's failure summary: "rank : 1 (local_rank: 1)", "exitcode : -9 (pid: 123)"
_TORCHRUN = re.compile(r"^\s*rank\s*:\s*(\d+).*?\n\s*exitcode\s*:\s*(-?\d+)", re.M)
# horovodrun / mpirun: "Process 1 exit with status code 137.", "rank 1 ... exited on signal 9"
_HOROVOD = re.compile(r"Process (\d+) exit with status code (\d+)")
_MPI = re.compile(r"rank (\d+) .*?exited on signal (\d+)")


def signal_name(number: int) -> str:
    """``SIGKILL`` for 9 (``signal 77`` for one Python does not know)."""
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _killed(who: str, number: int) -> str:
    name = signal_name(number)
    hint = " (out of memory?)" if name == "SIGKILL" else ""
    return f"{who} killed by {name}{hint}"


def _failed_rank(log_tail: str) -> tuple[int, int] | None:
    """(rank, how it ended: a negative number is a signal) of the first failed rank the
    launcher names in its summary (torchrun's root cause, horovodrun's, mpirun's)."""
    root = log_tail.rsplit("Root Cause", 1)[-1]
    m = _TORCHRUN.search(root) or _TORCHRUN.search(log_tail)
    if m:
        return int(m.group(1)), int(m.group(2))
    m = _MPI.search(log_tail)
    if m:
        return int(m.group(1)), -int(m.group(2))
    for m in _HOROVOD.finditer(log_tail):
        code = int(m.group(2))
        if code:
            return int(m.group(1)), -(code - 128) if code > 128 else code
    return None


def exit_message(code: int, log_tail: str) -> str:
    """What a payload's exit says, in words: ``rank 1 killed by SIGKILL (out of memory?)``,
    ``model file exited with code 3``, or ``payload exited with code 2: <its last words>``.

    ``code``: the trial's exit code as the wrapper saw it (a shell's 128+N for a signal);
    ``log_tail``: the last lines of its log (the launcher's summary names the failed rank)."""
    own = "gridml payload error:" in log_tail
    why = last_error_line(log_tail)
    rank = _failed_rank(log_tail)
    if rank is not None and rank[1] < 0:
        return _killed(f"rank {rank[0]}", -rank[1]) + (f": {why}" if own else "")
    if not own:
        if rank is not None and rank[1] > 0:
            return f"model file exited with code {rank[1]} (rank {rank[0]})"
        if code > 128 and code - 128 < 65:
            return _killed("payload", code - 128)
        if code not in _PAYLOAD_CODES or not why:
            return f"model file exited with code {code}" + (f": {why}" if why else "")
    return f"payload exited with code {code}" + (f": {why}" if why else "")
