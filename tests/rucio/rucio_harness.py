"""Start and stop the real Rucio test server (scripts/rucio-server.sh) from Python.

No pytest here: the fixtures (rucio_fixtures.py) and benchmarks/data_transfer.py both use it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "rucio-server.sh"


@dataclass
class RucioServer:
    """A running Rucio server on loopback with an ordinary account, a scope and an RSE."""

    state: Path
    db: str = "sqlite"  # or "postgresql" (Rucio's JSON metadata plugin works there)
    info: dict = field(default_factory=dict)
    start_seconds: float = 0.0  # wall time of the last start (install excluded if already there)

    @property
    def url(self) -> str:
        return str(self.info["url"])

    @property
    def env(self) -> dict[str, str]:
        """What a client (gridml) needs: Rucio's own variables plus gridml's RSE choice."""
        return {"RUCIO_CONFIG": self.info["client_config"], "RUCIO_ACCOUNT": self.info["account"],
                "GRIDML_RUCIO_RSE": self.info["rse"]}

    def start(self) -> None:
        t0 = time.perf_counter()
        _run("start", str(self.state), env={"GRIDML_RUCIO_DB": self.db})
        self.start_seconds = time.perf_counter() - t0
        self.info = json.loads((self.state / "server.json").read_text())

    def stop(self) -> None:
        _run("stop", str(self.state))

    def daemons(self) -> None:
        """Run judge-evaluator and abacus once (rules, dataset replicas, account usage)."""
        _run("daemons", str(self.state))

    def client_config_with_password(self, password: str) -> Path:
        """A copy of the client config with another password (for the wrong-password test)."""
        src = Path(self.info["client_config"]).read_text()
        path = self.state / "client" / f"wrong-{os.getpid()}.cfg"
        src = src.replace(f"password = {self.info['password']}", f"password = {password}")
        path.write_text(src.replace("jdoe.token", f"wrong-{os.getpid()}.token"))
        return path


def as_root(server: RucioServer, code: str) -> str:
    """Run ``code`` (Python, with ``client`` = a rucio Client for root) in a subprocess: root's
    config and token stay out of the test process. Returns its stdout."""
    import sys

    env = {**os.environ, "RUCIO_CONFIG": server.info["root_config"], "RUCIO_ACCOUNT": "root"}
    prog = "from rucio.client import Client\nclient = Client()\n" + code
    proc = subprocess.run([sys.executable, "-c", prog], capture_output=True, text=True, env=env,
                          timeout=120)
    if proc.returncode != 0:
        raise RuntimeError(f"as_root failed:\n{proc.stderr}")
    return proc.stdout


def _run(*args: str, env: dict[str, str] | None = None) -> str:
    proc = subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, timeout=900,
                          env={**os.environ, **(env or {})})
    if proc.returncode != 0:
        raise RuntimeError(f"rucio-server.sh {' '.join(args)} failed ({proc.returncode}):\n"
                           f"{proc.stdout}\n{proc.stderr}")
    return proc.stdout


def install_seconds() -> float:
    """Install the server's venv if needed; the wall time it took (≈0 when already there)."""
    t0 = time.perf_counter()
    _run("install")
    return time.perf_counter() - t0


def start_server(state: Path | None = None, db: str = "sqlite") -> RucioServer:
    server = RucioServer(Path(state or tempfile.mkdtemp(prefix="gridml-rucio-")), db=db)
    server.start()
    return server


def remove_server(server: RucioServer) -> None:
    """Stop the server (and its PostgreSQL, if any) and remove its folder."""
    _run("destroy", str(server.state))
    shutil.rmtree(server.state, ignore_errors=True)
