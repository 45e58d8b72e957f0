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
