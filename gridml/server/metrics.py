"""Prometheus metrics of the server: requests, reports ingested, trials by state.

Counters live in one registry per process (with several uvicorn workers each worker exports
its own; scrape them behind the proxy or run one worker per port).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST

REGISTRY = CollectorRegistry()
REQUESTS = Counter("gridml_http_requests", "HTTP requests by method, route and status",
                   ["method", "route", "status"], registry=REGISTRY)
LATENCY = Histogram("gridml_http_request_seconds", "HTTP request latency by route",
                    ["route"], registry=REGISTRY,
                    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0, 5.0))
REPORTS = Counter("gridml_epoch_reports_ingested", "epoch reports stored", registry=REGISTRY)
REPEATS = Counter("gridml_epoch_reports_repeated",
                  "epoch reports received again with the same body (no-op)", registry=REGISTRY)
TRIALS_ENQUEUED = Counter("gridml_trials_enqueued", "trials enqueued over the API",
                          registry=REGISTRY)


class TrialStates:
    """A collector asking the store, at scrape time, how many trials are in each state."""

    def __init__(self) -> None:
        self.store: Any = None

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily("gridml_trials", "trials by state", labels=["state"])
        if self.store is not None:
            for state, count in sorted(self.store.count_trials().items()):
                family.add_metric([state], count)
        yield family


TRIAL_STATES = TrialStates()
REGISTRY.register(TRIAL_STATES)  # type: ignore[arg-type]


def render(store: Any) -> tuple[bytes, str]:
    TRIAL_STATES.store = store
    return generate_latest(REGISTRY), CONTENT_TYPE_LATEST


class RequestMetrics:
    """Pure ASGI middleware counting requests by route template (bounded label set)."""

    def __init__(self, app: Callable[..., Any]) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status = {"code": 500}

        async def send_wrapper(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
            await send(message)

        start = time.perf_counter()
        try:
            await self.app(scope, receive, send_wrapper)
        finally:
            route = getattr(scope.get("route"), "path", "unmatched")
            REQUESTS.labels(scope["method"], route, str(status["code"])).inc()
            LATENCY.labels(route).observe(time.perf_counter() - start)
