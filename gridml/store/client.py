"""``ApiClient``: the metrics API over HTTP (httpx), one request path for every call; the
transport of the read-only remote store, and what `gridml --server` and tests talk through.

``_request`` adds the bearer token, retries connection errors and 5xx replies with exponential
backoff, and maps errors once: 404 -> NotFoundError, 409 -> ConflictError, 422 -> SpecError,
401/403 -> StoreError (with a hint about tokens), anything else -> StoreError. Pass
``transport=httpx.MockTransport(...)`` or an ASGI transport in tests.
"""

from __future__ import annotations

import math
import time
from typing import Any, Self

from gridml.errors import ConflictError, GridmlError, NotFoundError, SpecError, StoreError
from gridml.store.records import EpochReport

RETRY_STATUS = {502, 503, 504}  # and 500, for requests that are safe to repeat


class ApiClient:
    """Client of /api/v1; methods mirror the routes and return parsed JSON."""

    def __init__(self, base_url: str, token: str | None = None, transport: Any = None, *,
                 retries: int = 5, backoff: float = 0.2, timeout: float = 30.0) -> None:
        import httpx

        self.base_url = base_url.rstrip("/")
        self.token = token
        self.retries, self.backoff = retries, backoff
        self._http = httpx.Client(base_url=self.base_url, transport=transport, timeout=timeout)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the one request path --------------------------------------------------------------
    def _request(self, method: str, path: str, *, json: Any = None,
                 params: dict[str, Any] | None = None, token: str | None = None,
                 idempotent: bool | None = None) -> Any:
        """Send one request; retry what is safe to retry; map errors to gridml errors."""
        import httpx

        headers = {}
        if token or self.token:
            headers["Authorization"] = f"Bearer {token or self.token}"
        retry_on = RETRY_STATUS | ({500} if idempotent or method == "GET" else set())
        for attempt in range(self.retries + 1):
            try:
                reply = self._http.request(method, path, json=json, params=params,
                                           headers=headers)
            except (httpx.ConnectError, httpx.ConnectTimeout, httpx.RemoteProtocolError,
                    httpx.ReadError) as exc:
                if attempt == self.retries:
                    raise StoreError(f"cannot reach the metrics API at {self.base_url}: {exc}",
                                     hint="is `gridml serve` running there? check --server / "
                                          "backend.server") from exc
            else:
                if reply.status_code not in retry_on or attempt == self.retries:
                    return _parse(reply, method, path)
            time.sleep(self.backoff * 2**attempt)
        raise AssertionError("unreachable")

    # -- studies -----------------------------------------------------------------------------
    def health(self) -> dict[str, Any]:
        return self._request("GET", "/api/v1/health")  # type: ignore[no-any-return]

    def create_study(self, name: str, spec: dict[str, Any],
                     spec_hash: str | None = None) -> dict[str, Any]:
        """Create a study with the server's admin token (:func:`admin_token`); the reply
        carries the study's ``token``, which this client uses from now on."""
        study = self._request("POST", "/api/v1/studies", token=admin_token(self.base_url,
                                                                           self.token),
                              json={"name": name, "spec": spec, "spec_hash": spec_hash})
        self.token = study["token"]
        return study  # type: ignore[no-any-return]

    def list_studies(self) -> list[dict[str, Any]]:
        return self._request("GET", "/api/v1/studies")  # type: ignore[no-any-return]

    def get_study(self, study: str | int) -> dict[str, Any]:
        return self._request("GET", f"/api/v1/studies/{study}")  # type: ignore[no-any-return]

    def list_trials(self, study: str | int, states: list[str] | None = None, *,
                    limit: int = 1000, offset: int = 0) -> list[dict[str, Any]]:
        params: dict[str, Any] = {"limit": limit, "offset": offset}
        if states:
            params["state"] = ",".join(states)
        page = self._request("GET", f"/api/v1/studies/{study}/trials", params=params)
        return page["trials"]  # type: ignore[no-any-return]

    def enqueue_trial(self, study: str | int, hparams: dict[str, Any]) -> dict[str, Any]:
        return self._request("POST", f"/api/v1/studies/{study}/trials",  # type: ignore
                             json={"hparams": hparams})

    def ask(self, study: str | int, n: int = 1) -> list[dict[str, Any]]:
        reply = self._request("POST", f"/api/v1/studies/{study}/ask", params={"n": n},
                              idempotent=True)
        return reply["points"]  # type: ignore[no-any-return]

    def stop(self, study: str | int, trial: int | None = None, now: bool = False) -> dict[str, Any]:
        """`gridml stop` over the API (the study token): the trials asked, the study's state."""
        return self._request("POST", f"/api/v1/studies/{study}/stop",  # type: ignore
                             json={"trial": trial, "now": now}, idempotent=True)

    def study_epochs(self, study: str | int) -> dict[str, list[dict[str, Any]]]:
        return self._request("GET", f"/api/v1/studies/{study}/epochs")  # type: ignore

    # -- trials ------------------------------------------------------------------------------
    def get_trial(self, trial: int) -> dict[str, Any]:
        return self._request("GET", f"/api/v1/trials/{trial}")  # type: ignore[no-any-return]

    def post_epoch(self, trial: int, report: EpochReport | dict[str, Any]) -> bool:
        """True if stored, False if the same report was already there; ConflictError if not."""
        body = report.to_json() if isinstance(report, EpochReport) else dict(report)
        body["metrics"] = {k: _finite(v) for k, v in body["metrics"].items()}
        return self._request("POST", f"/api/v1/trials/{trial}/epochs",  # type: ignore
                             json=body, idempotent=True)["stored"]

    def list_epochs(self, trial: int) -> list[EpochReport]:
        bodies = self._request("GET", f"/api/v1/trials/{trial}/epochs")
        return [EpochReport.from_json(_nan_for_null(b)) for b in bodies]

    def heartbeat(self, trial: int) -> dict[str, Any]:
        return self._request("POST", f"/api/v1/trials/{trial}/heartbeat",  # type: ignore
                             idempotent=True)

    def finish(self, trial: int, state: str, objective: float | None = None,
               error: str | None = None) -> dict[str, Any]:
        return self._request("POST", f"/api/v1/trials/{trial}/finish",  # type: ignore
                             json={"state": state, "objective": objective, "error": error})

    def should_stop(self, trial: int) -> tuple[bool, str]:
        reply = self._request("GET", f"/api/v1/trials/{trial}/should-stop")
        return bool(reply["stop"]), str(reply["reason"])


def admin_token(base_url: str, given: str | None = None) -> str | None:
    """The admin token to create a study with on the server at ``base_url``: the token this
    client was given (``gridml --token``), unless it is a study or trial token; else
    $GRIDML_ADMIN_TOKEN; else, for a server on this machine only, the one `gridml serve`
    keeps in its token file ($GRIDML_ADMIN_TOKEN_FILE or $GRIDML_HOME/admin-token). The file
    is never read for another machine's server: its token must not leave this one."""
    import os

    from gridml.settings import read_admin_token, settings

    if given and not given.startswith(("gms_", "gmt_")):
        return given
    if os.environ.get("GRIDML_ADMIN_TOKEN"):
        return os.environ["GRIDML_ADMIN_TOKEN"].strip()
    if _on_this_machine(base_url):
        return read_admin_token(settings().admin_token_file)
    return None


def _on_this_machine(base_url: str) -> bool:
    """Whether the URL's host is an address of this machine (loopback, or one it can bind)."""
    import socket
    from urllib.parse import urlsplit

    host = urlsplit(base_url).hostname
    if not host:
        return False
    try:
        infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
    except (OSError, UnicodeError):
        return False
    for family, _, _, _, addr in infos:
        try:
            with socket.socket(family, socket.SOCK_DGRAM) as sock:
                sock.bind((addr[0], 0))
            return True
        except OSError:
            continue
    return False


def _finite(value: float | None) -> float | None:
    """Non-finite metrics travel as null (strict JSON has no NaN)."""
    return value if value is not None and math.isfinite(value) else None


def _nan_for_null(body: dict[str, Any]) -> dict[str, Any]:
    """The API writes non-finite metrics as null; EpochReport wants floats."""
    body["metrics"] = {k: float("nan") if v is None else v for k, v in body["metrics"].items()}
    return body


def _parse(reply: Any, method: str, path: str) -> Any:
    if reply.status_code < 400:
        return reply.json() if reply.content else None
    raise _error(reply, f"{method} {path}")


def _error(reply: Any, what: str) -> GridmlError:
    try:
        body = reply.json()
    except ValueError:
        body = {"detail": reply.text[:200]}
    detail, hint = body.get("detail"), body.get("hint")
    message = detail if isinstance(detail, str) else f"{what}: invalid request: {detail}"
    code = reply.status_code
    if code == 404:
        return NotFoundError(message, hint=hint)
    if code == 409:
        return ConflictError(message, hint=hint)
    if code == 422:
        return SpecError(message, hint=hint)
    if code in (401, 403):
        return StoreError(f"{what}: {message}", hint=hint or "use the study token printed by "
                          "`gridml submit` (or the trial's own token) for this study")
    return StoreError(f"{what}: HTTP {code}: {message}", hint=hint)
