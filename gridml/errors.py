"""gridml's one error tree.

Every error a user can cause or meet is a :class:`GridmlError`; the CLI prints its message on one
line (no traceback unless ``--debug``) and exits with its ``exit_code``. Foreign errors (Rucio,
panda-client, SQLAlchemy, HTTP) are translated into these once, at the boundary that meets them.

    GridmlError                      exit 1
    ├── SpecError                    exit 2   a spec (or prepare spec) is invalid; names file:line: field
    ├── UsageError                   exit 2   a command-line argument is wrong
    ├── NotFoundError                exit 3   a study, trial, DID, file ... does not exist
    ├── DataError                    exit 1   data store / Rucio: resolve, stage-in, upload, checksum
    │   └── ChecksumError
    ├── ExecutorError                exit 1   local processes, PanDA: submit, status, kill
    │   └── DuplicateTaskError       the task was submitted before (resubmission after a crash)
    ├── StoreError                   exit 1   metrics store / metrics API
    │   ├── ConflictError            an idempotent write with a different body (HTTP 409)
    │   └── StoreUnavailableError    the database: locked, unreachable, bad URL (HTTP 503)
    ├── SearchError                  exit 1   the searcher cannot propose (e.g. grid exhausted)
    └── PayloadError                 exit 1   the training payload failed (its log tail attached)
"""

from __future__ import annotations


class GridmlError(Exception):
    """Base of all gridml errors. ``hint`` says how to fix it, when we know."""

    exit_code = 1

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return f"{self.message} ({self.hint})" if self.hint else self.message


class SpecError(GridmlError):
    exit_code = 2

    def __init__(self, problems: list[str] | str, *, hint: str | None = None) -> None:
        self.problems = [problems] if isinstance(problems, str) else list(problems)
        super().__init__("\n".join(self.problems), hint=hint)


class UsageError(GridmlError):
    exit_code = 2


class NotFoundError(GridmlError):
    exit_code = 3


class DataError(GridmlError):
    pass


class ChecksumError(DataError):
    pass


class ExecutorError(GridmlError):
    pass


class DuplicateTaskError(ExecutorError):
    pass


class StoreError(GridmlError):
    pass


class ConflictError(StoreError):
    pass


class StoreUnavailableError(StoreError):
    """A database or driver error, translated once where the store meets SQLAlchemy."""


class SearchError(GridmlError):
    pass


class PayloadError(GridmlError):
    pass
