"""Rank 0's link to the metrics API: epoch reports, heartbeats, should-stop (urllib only).

``report()`` spools first (fsync), then hands the post to a sender thread so training never
waits on the network. Posts retry with exponential backoff on connection errors, timeouts,
429 and 5xx; the key (trial, epoch) makes a repeated post harmless. 409 (a different body was
stored for that epoch) and other 4xx are logged and not retried.
"""

from __future__ import annotations

import json
import logging
import queue
import threading
import time
import urllib.error
import urllib.request
from typing import Any

from payloads.runtime.spool import Spool

log = logging.getLogger("gridml.payload")
RETRYABLE = {408, 425, 429, 500, 502, 503, 504}


class HttpApi:
    """The few routes of metrics API v1 the payload uses, with one request path."""

    def __init__(self, url: str, token: str | None, trial_id: int, *, timeout: float = 10.0,
                 retries: int = 6, backoff: float = 0.5, max_backoff: float = 30.0) -> None:
        self.base = url.rstrip("/") + f"/api/v1/trials/{trial_id}"
        self.token, self.timeout = token, timeout
        self.retries, self.backoff, self.max_backoff = retries, backoff, max_backoff

    def _once(self, method: str, route: str, body: Any, key: str | None) -> tuple[int, Any]:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.base + route, data=data, method=method)
        req.add_header("Content-Type", "application/json")
        if key:
            req.add_header("Idempotency-Key", key)
        if self.token:
            req.add_header("Authorization", f"Bearer {self.token}")
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as r:
                raw = r.read()
                return r.status, json.loads(raw) if raw else None
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode(errors="replace")[:300]

    def request(self, method: str, route: str, body: Any = None, *, key: str | None = None,
                retries: int | None = None) -> tuple[int, Any]:
        """Send with retries; returns (status, body); status 0 means never reached the server."""
        status, result, delay = 0, None, self.backoff
        retries = self.retries if retries is None else retries
        for attempt in range(retries + 1):
            try:
                status, result = self._once(method, route, body, key)
                if status not in RETRYABLE:
                    return status, result
            except (urllib.error.URLError, OSError, TimeoutError) as e:
                status, result = 0, str(e)
            if attempt < retries:
                time.sleep(delay)
                delay = min(delay * 2, self.max_backoff)
        return status, result


class Reporter:
    """Spool + asynchronous poster + heartbeat thread + should-stop, for rank 0."""

    def __init__(self, spool: Spool, api: HttpApi | None, heartbeat_s: float = 30.0) -> None:
        self.spool, self.api, self.heartbeat_s = spool, api, heartbeat_s
        self.posted: list[int] = []       # epochs the server accepted
        self.failed: list[int] = []       # epochs left in the spool only
        self._q: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        if api is not None:
            self._start(self._send_loop, "gridml-reporter")
            self._start(self._heartbeat_loop, "gridml-heartbeat")

    def _start(self, fn: Any, name: str) -> None:
        t = threading.Thread(target=fn, name=name, daemon=True)
        t.start()
        self._threads.append(t)

    def report(self, report: dict[str, Any]) -> None:
        """Durable first (spool), then posted in the background."""
        self.spool.append(report)
        if self.api is not None:
            self._q.put(report)

    def _send_loop(self) -> None:
        while (item := self._q.get()) is not None:
            try:
                self._post(item)
            finally:
                self._q.task_done()
        self._q.task_done()

    def _post(self, report: dict[str, Any]) -> None:
        assert self.api is not None
        key = f"{self.api.base.rsplit('/', 1)[-1]}:{report['epoch']}"
        status, body = self.api.request("POST", "/epochs", report, key=key)
        if 200 <= status < 300:
            self.posted.append(int(report["epoch"]))
            return
        self.failed.append(int(report["epoch"]))
        what = "conflict: a different report is stored" if status == 409 else f"status {status}"
        log.warning("epoch %s report not posted (%s: %s); it stays in %s",
                    report["epoch"], what, str(body)[:200], self.spool.path)

    def _heartbeat_loop(self) -> None:
        assert self.api is not None
        while True:  # one at start ("running"), then every heartbeat_s
            self.api.request("POST", "/heartbeat", {"ts": time.time()}, retries=1)
            if self._stop.wait(self.heartbeat_s):
                return

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every queued report was posted or given up on; False on timeout."""
        end = None if timeout is None else time.monotonic() + timeout
        while self.api is not None and self._q.unfinished_tasks:
            if end is not None and time.monotonic() > end:
                return False
            time.sleep(0.02)
        return True

    def should_stop(self) -> tuple[bool, str]:
        """Ask the server whether to stop (after the last report is stored); errors mean no."""
        if self.api is None:
            return False, ""
        if not self.flush(timeout=20.0):
            return False, ""  # the server is not answering: keep training
        status, body = self.api.request("GET", "/should-stop", retries=2)
        if status == 200 and isinstance(body, dict):
            return bool(body.get("stop")), str(body.get("reason") or "")
        return False, ""

    def close(self, timeout: float = 60.0) -> None:
        """Drain the queue (bounded by ``timeout``) and stop the threads."""
        self._stop.set()
        if self.api is None:
            return
        self.flush(timeout)
        self._q.put(None)
        for t in self._threads:
            t.join(5.0)  # daemon threads: a heartbeat stuck on a dead server cannot hold us
