"""A PanDA server double for tests: the panda-client 2.x wire contract, JEDI and the pilot.

No real PanDA server can run here (it needs JEDI, a partitioned database and Apache), so
:class:`PandaDouble` serves the routes gridml uses on 127.0.0.1 (:mod:`.server`), keeps the task
table with PanDA's rules (:mod:`.jedi`) and runs each task's job on this machine as a pilot would
(:mod:`.pilot`): stage-in from the data store, runGen's exec, stage-out into the output datasets.
The real panda-client talks to it, configured the way users configure it::

    with PandaDouble(tmp_path) as panda:
        monkeypatch.setattr(os, "environ", {**os.environ, **panda.client_env()})  # or setenv each

``client_env()`` sets PANDA_URL_SSL/PANDA_URL/PANDACACHE_URL (plain http on loopback),
PANDA_BEHIND_REAL_LB=1 (no DNS lookup at import), and OIDC auth with a token file; with
``https=True`` the server speaks TLS and wants a client certificate, and the client presents an
X509 proxy (``X509_USER_PROXY``; ``PANDA_VERIFY_HOST=off`` for the self-signed server).

``isolated=True``: the jobs' payloads run in a network namespace of their own with a loopback
only (``ip netns add``, as scripts/slurm-cluster.sh makes its nodes), so, like payloads on a real
worker node, they cannot reach this machine: not the embedded API, not the double. Needs root
(:func:`can_isolate`); the namespace is removed on exit.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Self

from tests.panda_double import pilot
from tests.panda_double.jedi import Jedi, Task
from tests.panda_double.server import Api, serve
from tests.panda_double.tls import make_certificates, server_context

ROOT = Path(__file__).resolve().parents[2]
__all__ = ["PandaDouble", "Task", "can_isolate", "make_token"]


def can_isolate() -> bool:
    """Whether this machine lets the double run jobs in a network namespace (root, iproute2)."""
    return os.geteuid() == 0 and shutil.which("ip") is not None and shutil.which("nsenter") is not None


def make_token(name: str = "Jane Tester", nickname: str = "jtester", vo: str = "atlas") -> str:
    """An unsigned OIDC ID token with the claims panda-client reads (name, preferred_username)."""
    def part(doc: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(doc).encode()).decode().rstrip("=")
    claims = {"name": name, "preferred_username": nickname, "groups": [vo],
              "exp": int(time.time()) + 86400, "iat": int(time.time())}
    return f"{part({'alg': 'none', 'typ': 'JWT'})}.{part(claims)}.sig"


def job_env() -> dict[str, str]:
    """The job's environment, standing in for the container image: this virtualenv's python and
    horovodrun first on PATH, the repository (payloads/) importable."""
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '')}"
    env["PYTHONPATH"] = f"{ROOT}:{env.get('PYTHONPATH', '')}".rstrip(":")
    for key in [k for k in env if k.startswith(("PANDA_", "OIDC_"))]:
        env.pop(key)
    return env


class PandaDouble:
    """Start with ``with PandaDouble(tmp) as panda:``; ``panda.jedi`` is the task table."""

    def __init__(self, workdir: Path, *, data: Callable[[], Any] | None = None,
                 require_token: bool = True, max_active_tasks: int | None = None,
                 tick_s: float = 0.1, https: bool = False, isolated: bool = False) -> None:
        from gridml.data import open_data_manager

        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        store = data or (lambda: open_data_manager("local"))
        self.jedi = Jedi(store, self.workdir / "jobs", job_env(), tick_s=tick_s,
                         max_active_tasks=max_active_tasks)
        self.api = Api(self.jedi)
        self.require_token = require_token
        self.port = 0
        self._httpd: Any = None
        self.token_file = self.workdir / "token"
        self.token_file.write_text(make_token())
        self.certs = make_certificates(self.workdir / "tls") if https else None
        self.netns = f"gpd{os.getpid()}x{id(self) % 100000}" if isolated else None

    @property
    def url(self) -> str:
        scheme = "https" if self.certs else "http"
        return f"{scheme}://127.0.0.1:{self.port}/server/panda"

    def client_env(self, *, auth: bool = True) -> dict[str, str]:
        env = {"PANDA_URL_SSL": self.url, "PANDA_URL": self.url, "PANDACACHE_URL": self.url,
               "PANDA_BEHIND_REAL_LB": "1", "PANDA_CONFIG_ROOT": str(self.workdir / "config")}
        if auth and self.certs:  # X509: the proxy is the client certificate
            env.update({"X509_USER_PROXY": str(self.certs["proxy"]), "PANDA_VERIFY_HOST": "off"})
        elif auth:
            env.update({"PANDA_AUTH": "oidc", "PANDA_AUTH_VO": "atlas",
                        "OIDC_AUTH_TOKEN_FILE": str(self.token_file)})
        return env

    def up(self) -> Self:
        """Serve (again, on the same port after ``down``)."""
        tls = server_context(self.certs) if self.certs else None
        self._httpd = serve(self.api, port=self.port, require_token=self.require_token and not tls,
                            tls=tls)
        self.port = self._httpd.server_address[1]
        return self

    def down(self) -> None:
        """Stop answering (the server is down); tasks keep their state."""
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    def _isolate(self) -> None:
        """The worker nodes' network: a namespace with a loopback and no route out."""
        assert self.netns is not None
        subprocess.run(["ip", "netns", "add", self.netns], check=True, capture_output=True)
        subprocess.run(["ip", "-n", self.netns, "link", "set", "lo", "up"], check=True,
                       capture_output=True)
        self.jedi.env = {**self.jedi.env, pilot.NETNS: self.netns}

    def __enter__(self) -> Self:
        if self.netns:
            self._isolate()
        self.jedi.start()
        return self.up()

    def __exit__(self, *exc: object) -> None:
        self.down()
        self.jedi.stop()
        if self.netns:
            for pid in subprocess.run(["ip", "netns", "pids", self.netns], capture_output=True,
                                      text=True).stdout.split():
                try:
                    os.kill(int(pid), 9)  # a job still running in it (the test's own)
                except (OSError, ValueError):
                    pass
            subprocess.run(["ip", "netns", "del", self.netns], capture_output=True)
