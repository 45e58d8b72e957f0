"""The payload's one failure type: a one-line reason that names the file or field at fault."""

from __future__ import annotations


class PayloadFailure(Exception):
    """The trial cannot go on; ``str(exc)`` is printed on one line to stderr, exit code ``code``."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(" ".join(message.split()))
        self.code = code


class InputDataError(PayloadFailure):
    """An input file is missing, truncated, corrupt or has the wrong datasets/shapes (exit 3)."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"input file {path}: {reason}", code=3)
        self.path = path


# "continue me": the trial was told its job ends soon (SIGUSR1: Slurm's --signal=B:USR1@grace,
# forwarded to the ranks by the batch script; or sent by hand), every rank agreed on one batch
# boundary, rank 0 wrote a mid-epoch checkpoint, and every rank left with this code. The
# executors read it as "resubmit me from that checkpoint" (no retry used: backend.max_continuations
# counts these), never as a failure. 75 is EX_TEMPFAIL of sysexits.h: try again later.
CONTINUE_CODE = 75


def record_exit_code(code: int) -> None:
    """This rank's exit code into ``$GRIDML_EXIT_FILE`` (when set) for the script around the
    launcher, which exits 1 whatever its ranks' codes (torchrun, horovodrun): the first specific
    code (not 0, not 1) stays; a plain 1 is replaced by a specific one."""
    import os

    path = os.environ.get("GRIDML_EXIT_FILE")
    if not path or code == 0:
        return
    try:
        with open(path) as fh:
            old = int(fh.read().strip() or 0)
    except (OSError, ValueError):
        old = 0
    if old not in (0, 1) or (old == 1 and code == 1):
        return
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        with open(tmp, "w") as fh:
            fh.write(f"{code}\n")
        os.replace(tmp, path)
    except OSError:
        pass
