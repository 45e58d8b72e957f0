"""Waiting for a metrics API to answer ``/api/v1/health``: the one loop every starter uses
(the embedded server's thread, `gridml serve` as a child process)."""

from __future__ import annotations

import time
from collections.abc import Callable

HEALTH = "/api/v1/health"


def wait_healthy(url: str, alive: Callable[[], bool], timeout: float, pause: float = 0.05) -> bool:
    """True once ``url`` answers its health route with 200 within ``timeout`` seconds; False
    when it does not, or as soon as ``alive()`` says the server is gone."""
    import httpx

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not alive():
            return False
        try:
            if httpx.get(f"{url}{HEALTH}", timeout=2).status_code == 200:
                return True
        except httpx.HTTPError:
            pass
        time.sleep(pause)
    return False
