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


class ApiError(Exception):
    """An error the routes raise themselves (auth, a bad filter): ``status``, message, hint."""

    def __init__(self, status: int, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.hint = status, message, hint


# what each error status means, as the OpenAPI document says it; a route names its own
# meaning where it has one (e.g. 409 on finish)
MEANING = {
    400: "the request body is not readable as JSON, nests arrays/objects deeper than 64 "
         "levels (the server's depth limit), or the store refuses the request",
    401: "no bearer token, or an unknown or revoked one (reads need one when the server "
         "runs with closed reads)",
    403: "the token does not open this study or trial",
    404: "no such study or trial",
    409: "the request conflicts with what is stored",
    413: "the request body is over the server's size limit (8 MiB unless `gridml serve "
         "--max-body` says otherwise); `detail` names the limit",
    422: "the request does not validate against this document (`errors` says where)",
    503: "the metrics database is unavailable; retry later",
}


def documented(*codes: int, **meanings: str) -> dict[int | str, dict[str, Any]]:
    """``responses=`` for a route: each error status with the one error body, ``ErrorBody``;
    413 (the body limits, ``gridml.server.limits``) and 503 (the database) are always possible.
    ``meanings``: ``e409="..."`` overrides a meaning."""
    from gridml.server.schemas import ErrorBody

    out: dict[int | str, dict[str, Any]] = {}
    for code in sorted({*codes, 413, 503}):
        out[code] = {"model": ErrorBody,
                     "description": meanings.get(f"e{code}", MEANING[code])}
    return out
