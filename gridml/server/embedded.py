"""``EmbeddedServer``: the metrics API in a background thread on 127.0.0.1 (for `gridml submit`).

    with EmbeddedServer(store_url) as server:   # or: server = EmbeddedServer(u); url = server.start()
        ...                                     # payloads POST to server.url; stop() at the end
"""

from __future__ import annotations

import socket
import threading
from typing import Any, Self

from gridml.errors import StoreError
from gridml.server.health import wait_healthy


class EmbeddedServer:
    """uvicorn serving ``create_app(open_store(store_url))`` on a free loopback port."""

    def __init__(self, store_url: str | None = None, *, host: str = "127.0.0.1",
                 port: int = 0, open_reads: bool = True,
                 create_token: str | None = None) -> None:
        self.store_url = store_url
        self.host, self.port, self.open_reads = host, port, open_reads
        self.create_token = create_token
        self.url: str | None = None
        self._server: Any = None
        self._thread: threading.Thread | None = None
        self._store: Any = None

    def start(self, timeout: float = 30.0) -> str:
        """Start serving; returns the base URL once /api/v1/health answers."""
        import uvicorn

        from gridml.server.app import create_app
        from gridml.store import open_store

        self._store = open_store(self.store_url)
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.host, self.port))
        port = sock.getsockname()[1]
        app = create_app(self._store, open_reads=self.open_reads, create_token=self.create_token)
        config = uvicorn.Config(app,
                                log_level="warning", access_log=False, lifespan="off")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [sock]},
                                        name="gridml-api", daemon=True)
        self._thread.start()
        self.url = f"http://{self.host}:{port}"
        self._wait(timeout)
        return self.url

    def _wait(self, timeout: float) -> None:
        if not wait_healthy(str(self.url), self._alive, timeout):
            self.stop()
            raise StoreError(f"the embedded metrics API did not start on {self.url}",
                             hint="check the database URL and the log above")

    def _alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def stop(self) -> None:
        """Stop serving (waits for the thread) and close the database connections."""
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=10)
        if self._store is not None:
            self._store.close()
        self._server = self._thread = self._store = None

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
