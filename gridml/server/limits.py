"""Limits on request bodies, before anything reads them: size (413) and JSON nesting depth (400).

``BodyLimits`` is the first ASGI layer of the app (before the lean epoch path and FastAPI). A body
is read once, up to ``max_body`` bytes (a ``Content-Length`` over it is refused before reading),
checked, and handed on intact. Over the limit: 413 with the one error body naming the limit
(``gridml serve --max-body``, default 8 MiB). JSON nested deeper than ``max_depth`` (64) levels:
400 naming that limit (Python's parser would otherwise fail deep inside, or the validators
recurse that deep). Both are in the OpenAPI document (``gridml.server.errors.MEANING``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

DEFAULT_MAX_BODY = 8 * 1024 * 1024
MAX_DEPTH = 64
DRAIN = 64 * 1024 * 1024  # read (and drop) at most this much of a refused body, then close
_STRING = re.compile(rb'"(?:[^"\\]++|\\.)*+"')
_NOT_BRACKET = bytes(b for b in range(256) if b not in b"[]{}")
_UNITS = {"": 1, "b": 1, "k": 1000, "kb": 1000, "kib": 1024, "m": 1000**2, "mb": 1000**2,
          "mib": 1024**2, "g": 1000**3, "gb": 1000**3, "gib": 1024**3}
_SIZE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*")


def parse_size(text: str | int) -> int:
    """'8MiB' / '8M' / '500kB' / 8388608 -> bytes; ValueError naming the accepted forms."""
    if isinstance(text, int):
        value = text
    else:
        m = _SIZE.fullmatch(text)
        unit = m[2].lower() if m else ""
        if not m or unit not in _UNITS:
            raise ValueError(f"{text!r} is not a size: write e.g. 8MiB, 500kB or 1048576")
        value = int(float(m[1]) * _UNITS[unit])
    if value < 1024:
        raise ValueError(f"{text!r}: a body limit under 1 KiB would refuse ordinary requests")
    return value


def shown(size: int) -> str:
    """8388608 -> '8 MiB (8388608 bytes)'."""
    for unit, factor in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if size >= factor and size % factor == 0:
            return f"{size // factor} {unit} ({size} bytes)"
    return f"{size} bytes"


def too_deep(body: bytes, limit: int = MAX_DEPTH) -> bool:
    """Whether the JSON text ``body`` nests arrays/objects deeper than ``limit`` (strings,
    which may hold brackets, are skipped). Linear; most bodies are answered by a count."""
    if body.count(b"[") + body.count(b"{") <= limit:
        return False
    depth = 0
    for byte in _STRING.sub(b'""', body).translate(None, _NOT_BRACKET):
        if byte in (91, 123):  # [ {
            depth += 1
            if depth > limit:
                return True
        else:
            depth -= 1
    return False


class BodyLimits:
    """ASGI wrapper around ``app`` (see the module docstring)."""

    def __init__(self, app: Callable[..., Any], max_body: int = DEFAULT_MAX_BODY,
                 max_depth: int = MAX_DEPTH) -> None:
        self.app, self.max_body, self.max_depth = app, max_body, max_depth

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or not _has_body(scope):
            await self.app(scope, receive, send)
            return
        length = _content_length(scope)
        if length is not None and length > self.max_body:
            await _drain(receive)
            await self._too_large(send, length)
            return
        chunks: list[bytes] = []
        size = 0
        more = True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            more = bool(message.get("more_body"))
            if size > self.max_body:
                if more:
                    await _drain(receive)
                await self._too_large(send, None)
                return
            chunks.append(chunk)
        body = b"".join(chunks)
        if too_deep(body, self.max_depth):
            await reply(send, 400, {
                "detail": f"the JSON body nests deeper than {self.max_depth} levels (the "
                          "server's nesting depth limit)",
                "hint": f"send at most {self.max_depth} levels of nested arrays and objects"})
            return
        await self.app(scope, _replay(body, receive), send)

    async def _too_large(self, send: Any, length: int | None) -> None:
        size = f" ({length} bytes)" if length is not None else ""
        await reply(send, 413, {
            "detail": f"the request body{size} is over this server's limit of "
                      f"{shown(self.max_body)}",
            "hint": "send a smaller body (the limit is `gridml serve --max-body`)"})


def _has_body(scope: dict[str, Any]) -> bool:
    for name, value in scope["headers"]:
        if name == b"content-length":
            return value.strip() not in (b"0", b"")
        if name == b"transfer-encoding":
            return True
    return False


def _content_length(scope: dict[str, Any]) -> int | None:
    for name, value in scope["headers"]:
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


async def _drain(receive: Any) -> None:
    """Read and drop what the client still sends (up to ``DRAIN``), so that it reads our
    reply instead of a reset connection."""
    read = 0
    while read < DRAIN:
        message = await receive()
        if message["type"] == "http.disconnect":
            return
        read += len(message.get("body", b""))
        if not message.get("more_body"):
            return


def _replay(body: bytes, receive: Any) -> Callable[[], Any]:
    """The body in one message, then the real channel (a later disconnect is the client's)."""
    sent = False

    async def replayed() -> dict[str, Any]:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()  # type: ignore[no-any-return]

    return replayed


async def reply(send: Any, status: int, content: dict[str, Any]) -> None:
    data = json.dumps(content, separators=(",", ":")).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(data)).encode())]})
    await send({"type": "http.response.body", "body": data})
