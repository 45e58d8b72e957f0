"""gridml errors as HTTP statuses, for the FastAPI app and the lean epoch path alike.

NotFoundError 404, ConflictError 409, SpecError 422, SearchError 409, StoreUnavailableError
(the database: locked, unreachable) 503, any other GridmlError 400. Every error body is
``{"detail": message, "hint": fix or null}``.
"""

from __future__ import annotations

from typing import Any

from gridml.errors import (
    ConflictError,
    GridmlError,
    NotFoundError,
    SearchError,
    SpecError,
    StoreUnavailableError,
)

STATUS = [(NotFoundError, 404), (ConflictError, 409), (SpecError, 422), (SearchError, 409),
          (StoreUnavailableError, 503), (GridmlError, 400)]


def status_of(exc: GridmlError) -> int:
    return next(code for cls, code in STATUS if isinstance(exc, cls))


def error_body(exc: GridmlError) -> dict[str, Any]:
    return {"detail": exc.message, "hint": exc.hint}
