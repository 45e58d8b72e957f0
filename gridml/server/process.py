"""``ServerProcess``: `gridml serve` as a child process on a free loopback port.

Used by the integration tests (kill -9 / restart), the dashboard test and the benchmark:

    with ServerProcess("sqlite:///tmp/g.db", workers=2) as srv:
        srv.url            # http://127.0.0.1:PORT, answering /api/v1/health
        srv.kill()         # SIGKILL (a crash); srv.start() brings it back on the same port
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Self

from gridml.errors import StoreError
from gridml.server import ports
from gridml.server.health import wait_healthy

SERVE = ["-m", "gridml.serve"]  # the `gridml serve` command (a process, not an import)


def free_port() -> int:
    """A free port below the ephemeral range (gridml/server/ports.py): between choosing it and
    the server's bind (and across a kill and restart on it) no outgoing connection takes it."""
    return ports.pick()


class ServerProcess:
    """One `gridml serve` process group (uvicorn and its workers)."""

    def __init__(self, db_url: str, *, port: int | None = None, workers: int = 1,
                 log: Path | None = None, open_reads: bool = True) -> None:
        self.db_url, self.workers, self.log = db_url, workers, log
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.open_reads = open_reads
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 60.0) -> Self:
        args = [sys.executable, *SERVE, "--port", str(self.port), "--db", self.db_url,
                "--workers", str(self.workers),
                "--open-reads" if self.open_reads else "--closed-reads"]
        with open(self.log or os.devnull, "ab") as out:  # the child keeps its own copy
            self.proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT,
                                         start_new_session=True, env=os.environ.copy())
        self._wait(timeout)
        return self

    def _wait(self, timeout: float) -> None:
        if not wait_healthy(self.url, self._alive, timeout, pause=0.1):
            self.stop()
            raise StoreError(f"`gridml serve` did not come up on {self.url}",
                             hint=f"see its log {self.log}" if self.log else None)

    def _alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL the whole process group (a crash, not a shutdown)."""
        self._signal(signal.SIGKILL)

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after 10 s."""
        self._signal(signal.SIGTERM, wait=10)

    def _signal(self, sig: int, wait: float = 10) -> None:
        if self.proc is None or self.proc.poll() is not None:
            self.proc = None
            return
        try:
            os.killpg(self.proc.pid, sig)
            self.proc.wait(wait)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(5)
        except ProcessLookupError:
            pass
        self.proc = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
