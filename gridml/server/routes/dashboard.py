"""GET /: the dashboard page (static HTML + JS from ``gridml/server/dashboard``, no CDN)."""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter, HTTPException, Response
from fastapi.responses import FileResponse

router = APIRouter(tags=["dashboard"], include_in_schema=False)
HERE = Path(__file__).resolve().parent.parent / "dashboard"
FILES = {"dashboard.js": "text/javascript", "dashboard.css": "text/css"}


@router.get("/")
def page() -> FileResponse:
    return FileResponse(HERE / "index.html", media_type="text/html")


@router.get("/favicon.ico")
def favicon() -> Response:
    return Response(status_code=204)


@router.get("/static/{name}")
def static(name: str) -> FileResponse:
    if name not in FILES or not (HERE / name).is_file():
        raise HTTPException(404, f"no static file '{name}'")
    return FileResponse(HERE / name, media_type=FILES[name])
