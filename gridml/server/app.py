"""The FastAPI app factory: ``create_app(store) -> FastAPI``.

Routers per resource (``gridml.server.routes``), gridml errors mapped to HTTP statuses once
(``gridml.server.errors``: database trouble is the store's ``StoreUnavailableError``, 503).
Every error body is ``{"detail": message, "hint": fix or null}``.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from gridml.errors import GridmlError
from gridml.server.app_json import SafeJSON
from gridml.server.errors import ApiError, error_body, status_of
from gridml.server.fastpath import EpochFastPath
from gridml.server.limits import DEFAULT_MAX_BODY, MAX_DEPTH, BodyLimits
from gridml.store.sql import SqlStore

DASHBOARD = Path(__file__).resolve().parent / "dashboard"


def _install_errors(app: FastAPI) -> None:
    """Every error answer has the one documented body, ``ErrorBody``."""

    async def gridml_error(_request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, GridmlError)
        return SafeJSON(error_body(exc), status_code=status_of(exc))

    async def api_error(_request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, ApiError)
        return SafeJSON({"detail": exc.message, "hint": exc.hint}, status_code=exc.status)

    async def http_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, HTTPException)
        headers = dict(exc.headers or {})
        hint = None
        if exc.status_code == 405:  # Starlette names only the first matching route's methods
            allowed = _allowed_methods(app, request.scope)
            headers["Allow"] = ", ".join(allowed)
            hint = f"{request.url.path} takes {' and '.join(allowed)}"
        return SafeJSON({"detail": str(exc.detail), "hint": hint}, status_code=exc.status_code,
                        headers=headers or None)

    async def invalid_request(_request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        return SafeJSON(validation_body(exc.errors()), status_code=422)

    app.add_exception_handler(GridmlError, gridml_error)
    app.add_exception_handler(ApiError, api_error)
    app.add_exception_handler(HTTPException, http_error)
    app.add_exception_handler(RequestValidationError, invalid_request)


def _allowed_methods(app: FastAPI, scope: Any) -> list[str]:
    """The methods some route serves at this path (GET and POST may be two routes; routers
    are nested, so ask each route whether it would take the request with that method)."""
    from starlette.routing import Match

    return [method for method in ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")
            if any(route.matches({**scope, "method": method})[0] == Match.FULL
                   for route in app.router.routes)]


def validation_body(errors: Any) -> dict[str, Any]:
    """FastAPI's validation errors as ``ErrorBody``: one line naming the first problems in
    ``detail``, each problem (location, message, type; not the input) in ``errors``."""
    problems = [{"loc": [p if isinstance(p, (str, int)) else str(p) for p in e.get("loc", ())],
                 "msg": str(e.get("msg", "")), "type": str(e.get("type", ""))} for e in errors]

    def where(problem: dict[str, Any]) -> str:
        return ".".join(str(p)[:60] for p in problem["loc"]) or "request"

    shown = "; ".join(f"{where(p)}: {p['msg']}" for p in problems[:3])
    more = f" (and {len(problems) - 3} more)" if len(problems) > 3 else ""
    return {"detail": f"invalid request: {shown}{more}",
            "hint": "correct the fields named; /openapi.json gives each field's type and limits",
            "errors": problems}


class GridmlAPI(FastAPI):
    """FastAPI behind the body limits (``gridml.server.limits``: size, JSON depth), with the
    lean path for payloads' epoch reports (``gridml.server.fastpath``) tried before the
    middleware stack; everything else goes through FastAPI as usual."""

    fast: Any = None
    entry: Any = None  # BodyLimits around fast

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if self.entry is not None:
            await self.entry(scope, receive, send)
        elif self.fast is not None:
            await self.fast(scope, receive, send)
        else:
            await super().__call__(scope, receive, send)


def create_app(store: SqlStore, *, open_reads: bool = True, create_token: str | None = None,
               anonymous_studies: bool | None = None, max_body: int = DEFAULT_MAX_BODY,
               max_depth: int = MAX_DEPTH) -> FastAPI:
    """The metrics API on ``store``. ``open_reads``: GET routes work without a token (local use,
    dashboard); a ``gridml serve`` for a group turns it off and every read needs a token.
    ``create_token``: the admin token; creating a study with it as bearer token works.
    ``anonymous_studies``: creating a study without it works too, for clients on loopback only
    (default: when there is no admin token, as in the embedded server of `gridml submit`, which
    listens on 127.0.0.1; `gridml serve` always has a token and passes False unless started
    with ``--allow-anonymous-studies``). Neither: no study can be created.
    ``max_body``/``max_depth``: request bodies over that size (413) or JSON nesting (400)."""
    from gridml.server import metrics
    from gridml.server.ingest import EpochBatcher
    from gridml.server.routes import dashboard, figures, stop, studies, system, trials

    app = GridmlAPI(title="gridml metrics API", version="1", default_response_class=SafeJSON,
                  description="Studies, trials, per-epoch metrics, search and early stopping "
                              "for gridml campaigns. Auth: `Authorization: Bearer <token>`.")
    app.state.store = store
    app.state.open_reads = open_reads
    app.state.create_token = create_token
    app.state.anonymous_studies = (not create_token) if anonymous_studies is None \
        else anonymous_studies
    app.state.max_body, app.state.max_depth = max_body, max_depth
    app.state.token_cache = {}
    app.state.batcher = EpochBatcher(store)
    for router in (studies.router, stop.router, trials.router, system.router,
                   dashboard.router, figures.router):
        app.include_router(router)
    _install_errors(app)
    app.add_middleware(metrics.RequestMetrics)
    app.fast = EpochFastPath(partial(FastAPI.__call__, app), app.state)
    app.entry = BodyLimits(app.fast, max_body=max_body, max_depth=max_depth)
    return app


def app_from_env() -> FastAPI:
    """The factory uvicorn workers call (``gridml serve``): URL, read mode, admin token, whether
    anonymous creation (loopback) is allowed and the body limit, from the env `serve` sets."""
    import os

    store = SqlStore(os.environ["GRIDML_SERVE_DB"])  # migrated by `gridml serve` already
    app = create_app(store, open_reads=os.environ.get("GRIDML_SERVE_OPEN_READS") == "1",
                     create_token=os.environ.get("GRIDML_CREATE_TOKEN") or None,
                     anonymous_studies=os.environ.get("GRIDML_SERVE_ANONYMOUS_STUDIES") == "1",
                     max_body=int(os.environ.get("GRIDML_SERVE_MAX_BODY") or DEFAULT_MAX_BODY))
    quiet_gc()
    return app


def quiet_gc() -> None:
    """Keep the start-up objects (FastAPI, pydantic, SQLAlchemy: hundreds of thousands) out of
    the garbage collector's full passes, which otherwise stall a worker for tens of ms."""
    import gc

    gc.collect()
    gc.freeze()
