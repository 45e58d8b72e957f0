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
    """FastAPI, with the lean path for payloads' epoch reports (``gridml.server.fastpath``)
    tried before the middleware stack; everything else goes through FastAPI as usual."""

    fast: Any = None

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if self.fast is None:
            await super().__call__(scope, receive, send)
        else:
            await self.fast(scope, receive, send)


def create_app(store: SqlStore, *, open_reads: bool = True,
               create_token: str | None = None) -> FastAPI:
    """The metrics API on ``store``. ``open_reads``: GET routes work without a token (local use,
    dashboard); a ``gridml serve`` for a group turns it off and every read needs a token.
    ``create_token``: if set, creating a study needs it as bearer token."""
    from gridml.server import metrics
    from gridml.server.ingest import EpochBatcher
    from gridml.server.routes import dashboard, studies, system, trials

    app = GridmlAPI(title="gridml metrics API", version="1", default_response_class=SafeJSON,
                  description="Studies, trials, per-epoch metrics, search and early stopping "
                              "for gridml campaigns. Auth: `Authorization: Bearer <token>`.")
    app.state.store = store
    app.state.open_reads = open_reads
    app.state.create_token = create_token
    app.state.token_cache = {}
    app.state.batcher = EpochBatcher(store)
    for router in (studies.router, trials.router, system.router, dashboard.router):
        app.include_router(router)
    _install_errors(app)
    app.add_middleware(metrics.RequestMetrics)
    app.fast = EpochFastPath(partial(FastAPI.__call__, app), app.state)
    return app


def app_from_env() -> FastAPI:
    """The factory uvicorn workers call (``gridml serve``): URL and read mode from the env."""
    import os

    store = SqlStore(os.environ["GRIDML_SERVE_DB"])  # migrated by `gridml serve` already
    app = create_app(store, open_reads=os.environ.get("GRIDML_SERVE_OPEN_READS") == "1",
                     create_token=os.environ.get("GRIDML_CREATE_TOKEN") or None)
    quiet_gc()
    return app


def quiet_gc() -> None:
    """Keep the start-up objects (FastAPI, pydantic, SQLAlchemy: hundreds of thousands) out of
    the garbage collector's full passes, which otherwise stall a worker for tens of ms."""
    import gc

    gc.collect()
    gc.freeze()
