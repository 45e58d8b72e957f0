"""The panda-client 2.x wire contract, served on loopback for the routes gridml uses.

``/api/v1/<module>/<method>``: POST with a JSON body, GET with query parameters (panda-client's
``urlencode(doseq=True)``, booleans as ``True``/``False``), replies ``{"success", "message",
"data"}`` as the real server's ``generate_response`` builds them, with the same data per route:

    GET  system/is_alive                 {"success": true}
    POST task/submit                     data = jediTaskID (success) or the error code
    GET  task/get_status                 data = the task status
    GET  task/get_details                data = {inDS, outDS, statistics, PandaID, status, ...}
    POST task/kill                       data = return code (0: registered)
    POST task/retry                      data = return code, message
    GET  task/get_task_parameters        data = the task parameter map
    POST file_server/validate_cache_file {file_size, checksum} -> message FOUND:<host>:<name>
                                         when the same file is in the cache (reuseSandbox)
    POST file_server/upload_cache_file   multipart field "file" (Client.putFile) -> success
    GET  /cache/<name>                   the cached file (what runGen's -a and Client.getFile get)

Auth: with ``require_token`` every route but ``is_alive`` wants ``Authorization: Bearer <JWT>``
(what panda-client sends with ``PANDA_AUTH=oidc``); the user is the token's ``name`` claim, as the
server derives it. Without the header the answer is HTTP 403, as from the real front end. In
HTTPS mode the client certificate (panda-client's X509 proxy) is required by the TLS handshake
and names the user (its last CN).
"""

from __future__ import annotations

import base64
import json
import os
import ssl
import threading
from collections.abc import Callable
from email.parser import BytesParser
from email.policy import default as default_policy
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

from tests.panda_double.jedi import Jedi
from tests.panda_double.tls import user_from_certificate

Route = Callable[["Api", dict[str, Any], str], dict[str, Any]]


def response(success: bool, message: str = "", data: Any = None) -> dict[str, Any]:
    return {"success": success, "message": message, "data": data}


def _int(params: dict[str, Any], key: str) -> int | None:
    try:
        return int(params[key])
    except (KeyError, TypeError, ValueError):
        return None


class Api:
    """The route handlers, on top of :class:`Jedi`."""

    def __init__(self, jedi: Jedi) -> None:
        self.jedi = jedi
        self.calls: list[str] = []  # "<METHOD> <module>/<method>" in order, for the tests
        self.cache = jedi.workroot.parent / "cache"  # PanDA's cache (sandboxes)
        self.uploads: list[str] = []

    def is_alive(self, p: dict[str, Any], user: str) -> dict[str, Any]:
        return response(True)

    def submit(self, p: dict[str, Any], user: str) -> dict[str, Any]:
        code, message = self.jedi.insert(p.get("task_parameters"), user)
        if code not in (0, 3):
            return response(False, message, code)
        return response(True, message, int(message.split("jediTaskID=")[1].split()[0]))

    def get_status(self, p: dict[str, Any], user: str) -> dict[str, Any]:
        task = self.jedi.get(_int(p, "task_id") or -1)
        return response(True, data=task.status) if task else response(False, "Task not found")

    def get_details(self, p: dict[str, Any], user: str) -> dict[str, Any]:
        task = self.jedi.get(_int(p, "task_id") or -1)
        if task is None:
            return response(False, "Task not found or error retrieving the details")
        out = [i["dataset"] for i in task.params["jobParameters"] if i.get("param_type") == "output"]
        details = {"inDS": ",".join(task.datasets.values()), "outDS": ",".join(out),
                   "statistics": _statistics(task), "PandaID": [j.panda_id for j in task.jobs],
                   "mergeStatus": None, "mergePandaID": []}
        if str(p.get("include_status")) == "True":
            details["status"] = task.status
        if str(p.get("include_parameters")) == "True":
            details["cliParams"] = task.params.get("cliParams", "")
        return response(True, data=details)

    def kill(self, p: dict[str, Any], user: str) -> dict[str, Any]:
        code, message = self.jedi.command(_int(p, "task_id") or -1, "kill")
        return response(code == 0, message, code)

    def retry(self, p: dict[str, Any], user: str) -> dict[str, Any]:
        code, message = self.jedi.command(_int(p, "task_id") or -1, "retry")
        return response(True, message, code)

    def validate_cache_file(self, p: dict[str, Any], user: str) -> dict[str, Any]:
        """The gzip footer (CRC32, size) names a file already in the cache, as the server checks."""
        for path in sorted(self.cache.glob("*")):
            data = path.read_bytes()
            if len(data) == _int(p, "file_size") and data[-8:-4] == int(
                    p.get("checksum") or 0).to_bytes(4, "little"):
                return response(True, f"FOUND:127.0.0.1:{path.name}")
        return response(False, "not found")

    def upload_cache_file(self, p: dict[str, Any], user: str) -> dict[str, Any]:
        name, data = p.get("file") or (None, None)
        if not name or data is None:
            return response(False, "no file in the request")
        self.cache.mkdir(parents=True, exist_ok=True)
        (self.cache / os.path.basename(str(name))).write_bytes(data)
        self.uploads.append(os.path.basename(str(name)))
        return response(True, f"uploaded {os.path.basename(str(name))}")

    def get_task_parameters(self, p: dict[str, Any], user: str) -> dict[str, Any]:
        task = self.jedi.get(_int(p, "task_id") or -1)
        return response(True, data=task.params) if task else response(False, "Task not found")


def _statistics(task: Any) -> str:
    n = sum(len(v) for v in task.streams.values())
    if not task.jobs:
        return f"tobedone*{n}" if n else ""
    job = task.jobs[-1]
    return f"{job.status}*{n}"


ROUTES: dict[tuple[str, str], Route] = {
    ("GET", "system/is_alive"): Api.is_alive,
    ("POST", "task/submit"): Api.submit,
    ("GET", "task/get_status"): Api.get_status,
    ("GET", "task/get_details"): Api.get_details,
    ("POST", "task/kill"): Api.kill,
    ("POST", "task/retry"): Api.retry,
    ("GET", "task/get_task_parameters"): Api.get_task_parameters,
    ("POST", "file_server/validate_cache_file"): Api.validate_cache_file,
    ("POST", "file_server/upload_cache_file"): Api.upload_cache_file,
}
OPEN = ("system/is_alive", "task/get_task_parameters")  # no credential needed, as on the server


def user_from_token(header: str | None) -> str | None:
    """The ``name`` claim of a bearer JWT (signature not checked: a test double)."""
    if not header or not header.startswith("Bearer "):
        return None
    try:
        payload = header.split()[1].split(".")[1]
        claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    except (IndexError, ValueError):
        return None
    return str(claims.get("name") or claims.get("sub") or "") or None


class Handler(BaseHTTPRequestHandler):
    api: Api
    require_token: bool

    def log_message(self, fmt: str, *args: Any) -> None:  # quiet
        return None

    def do_GET(self) -> None:
        path = urlparse(self.path).path
        if path.startswith("/cache/"):  # open, as the cache's download route
            return self._send_file(path[len("/cache/"):])
        query = parse_qs(urlparse(self.path).query)
        self._serve("GET", {k: v[0] if len(v) == 1 else v for k, v in query.items()})

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b"{}"
        if self.headers.get_content_type() == "multipart/form-data":
            return self._serve("POST", multipart(self.headers.get("Content-Type", ""), body))
        try:
            params = json.loads(body or b"{}")
        except ValueError:
            return self._reply(400, {"error": "body is not JSON"})
        self._serve("POST", params if isinstance(params, dict) else {})

    def _serve(self, method: str, params: dict[str, Any]) -> None:
        path = urlparse(self.path).path
        if not path.startswith("/api/v1/"):
            return self._reply(404, {"error": f"no route {path}"})
        route = path[len("/api/v1/"):]
        handler = ROUTES.get((method, route))
        if handler is None:
            return self._reply(404 if not any(r == route for _, r in ROUTES) else 405,
                               {"error": f"no route {method} {route}"})
        user = user_from_token(self.headers.get("Authorization")) or self._user_from_certificate()
        if self.require_token and user is None and route not in OPEN:
            return self._reply(403, {"error": "no valid token"})
        self.api.calls.append(f"{method} {route}")
        self._reply(200, handler(self.api, params, user or "anonymous"))

    def _user_from_certificate(self) -> str | None:
        getpeercert = getattr(self.connection, "getpeercert", None)
        return user_from_certificate(getpeercert()) if getpeercert else None

    def _send_file(self, name: str) -> None:
        path = self.api.cache / os.path.basename(name)
        if not path.is_file():
            return self._reply(404, {"error": f"no {name} in the cache"})
        self.api.calls.append(f"GET cache/{path.name}")
        data = path.read_bytes()
        self.send_response(200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _reply(self, code: int, doc: dict[str, Any]) -> None:
        body = json.dumps(doc).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def multipart(content_type: str, body: bytes) -> dict[str, Any]:
    """multipart/form-data fields: name -> (filename, bytes) for files, else the text."""
    msg = BytesParser(policy=default_policy).parsebytes(
        f"Content-Type: {content_type}\r\n\r\n".encode() + body)
    fields: dict[str, Any] = {}
    for part in msg.iter_parts():
        name = part.get_param("name", header="content-disposition")
        data = part.get_payload(decode=True) or b""
        filename = part.get_filename()
        fields[str(name)] = (filename, data) if filename else data.decode(errors="replace")
    return fields


def serve(api: Api, *, port: int = 0, require_token: bool = True,
          tls: ssl.SSLContext | None = None) -> ThreadingHTTPServer:
    """Start the server in a thread on 127.0.0.1 (HTTPS with ``tls``); stop it with ``shutdown()``."""
    handler = type("BoundHandler", (Handler,), {"api": api, "require_token": require_token})
    httpd = ThreadingHTTPServer(("127.0.0.1", port), handler)
    httpd.daemon_threads = True
    if tls is not None:
        httpd.socket = tls.wrap_socket(httpd.socket, server_side=True)
    threading.Thread(target=httpd.serve_forever, name="panda-double", daemon=True).start()
    return httpd
