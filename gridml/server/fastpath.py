"""A lean path for the one hot route, ``POST /api/v1/trials/{trial}/epochs`` with a trial token.

Payloads post one report per epoch; with hundreds of trials this route is nearly all of the
server's load, and FastAPI's per-request machinery (dependency solving, response models) costs
more CPU than storing the report. This ASGI wrapper (the first thing ``GridmlAPI`` calls)
serves the common case itself, with the same validation model (``EpochIn``), the same group
commit and the same replies:

- the bearer token is a trial token of *this* trial already in the token cache, and
- the body validates as strict JSON;

anything else (study tokens, unknown tokens, invalid bodies, NaN literals) is handed, body
intact, to the FastAPI route, which remains the reference implementation and the documented one.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from typing import Any

from pydantic import ValidationError

from gridml.errors import GridmlError
from gridml.server import metrics
from gridml.server.errors import error_body, status_of
from gridml.server.schemas import EpochIn

PATH = re.compile(r"/api/v1/trials/([1-9][0-9]{0,9})/epochs")
ROUTE = "/api/v1/trials/{trial}/epochs"  # the label /metrics counts it under
MAX_ID = 2**31 - 1
JSON_HEADERS = [(b"content-type", b"application/json")]


class EpochFastPath:
    """ASGI middleware; ``state`` is the app's state (token cache, batcher)."""

    def __init__(self, app: Callable[..., Any], state: Any) -> None:
        self.app, self.state = app, state

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        match = PATH.fullmatch(scope.get("path", "")) if scope["type"] == "http" else None
        if match is None or scope["method"] != "POST" or int(match[1]) > MAX_ID:
            await self.app(scope, receive, send)
            return
        body = await _read_body(receive)
        if not await self._serve(scope, send, int(match[1]), body):
            await self.app(scope, _replay(body), send)

    async def _serve(self, scope: dict[str, Any], send: Any, trial: int, body: bytes) -> bool:
        if not self._own_trial_token(scope, trial):
            return False
        try:
            report = EpochIn.model_validate_json(body)
        except ValidationError:
            return False
        start = time.perf_counter()
        try:
            stored = await self.state.batcher.record(trial, report.report())
        except GridmlError as exc:
            status = status_of(exc)
            await _reply(send, status, error_body(exc))
            _count(status, start)
            return True
        (metrics.REPORTS if stored else metrics.REPEATS).inc()
        await _reply(send, 201 if stored else 200,
                     {"trial_id": trial, "epoch": report.epoch, "stored": stored})
        _count(201 if stored else 200, start)
        return True

    def _own_trial_token(self, scope: dict[str, Any], trial: int) -> bool:
        for name, value in scope["headers"]:
            if name == b"authorization":
                scheme, _, token = value.decode("latin-1").partition(" ")
                hit = self.state.token_cache.get(token.strip())
                return (scheme.lower() == "bearer" and hit is not None
                        and hit[0] > time.monotonic() and hit[1][1] == trial)
        return False


def _count(status: int, start: float) -> None:
    """The same request metrics as ``metrics.RequestMetrics`` records for other routes."""
    metrics.REQUESTS.labels("POST", ROUTE, str(status)).inc()
    metrics.LATENCY.labels(ROUTE).observe(time.perf_counter() - start)


async def _read_body(receive: Any) -> bytes:
    chunks = []
    while True:
        message = await receive()
        chunks.append(message.get("body", b""))
        if not message.get("more_body"):
            return b"".join(chunks)


def _replay(body: bytes) -> Callable[[], Any]:
    sent = False

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return {"type": "http.disconnect"}

    return receive


async def _reply(send: Any, status: int, content: dict[str, Any]) -> None:
    data = json.dumps(content, separators=(",", ":")).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [*JSON_HEADERS, (b"content-length", str(len(data)).encode())]})
    await send({"type": "http.response.body", "body": data})
