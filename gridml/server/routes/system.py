"""Health and Prometheus metrics."""

from __future__ import annotations

from fastapi import APIRouter, Response

from gridml.server import metrics
from gridml.server.deps import Store
from gridml.server.errors import documented

router = APIRouter(tags=["system"])


@router.get("/api/v1/health", responses=documented())
def health(store: Store) -> dict[str, str]:
    """Liveness: the app answers and its database too."""
    store.count_trials(0)
    return {"status": "ok"}


@router.get("/metrics", response_class=Response, responses={
    200: {"content": {"text/plain": {"schema": {"type": "string"}}},
          "description": "Prometheus text format"}, **documented()})
def prometheus(store: Store) -> Response:
    """Requests, reports ingested, trials by state (Prometheus text format)."""
    body, content_type = metrics.render(store)
    return Response(content=body, media_type=content_type)
