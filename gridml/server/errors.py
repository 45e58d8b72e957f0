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
    body: dict[str, Any] = {"detail": exc.message, "hint": exc.hint}
    if isinstance(exc, PointError):
        body["errors"] = exc.fields()
    return body


class PointError(SpecError):
    """A point outside its study's ``search.space`` (422): each problem, ``hparams.NAME: what;
    fix`` as ``gridml.specmodel.space.point_problems`` words it, also in ``errors`` with its
    location, as a request that does not validate lists them (``loc`` ``["body", "hparams",
    NAME]``, ``type`` ``"outside_space"``), so that an optimizer can tell which dimension."""

    def fields(self) -> list[dict[str, Any]]:
        out = []
        for problem in self.problems:
            where, _, msg = problem.partition(": ")
            loc: list[str | int] = ["body", *where.split(".", 1)] if msg else ["body", "hparams"]
            out.append({"loc": loc, "msg": msg or problem, "type": "outside_space"})
        return out


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
    # (a route whose content is also checked against stored state names it, e.g. the space)
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
