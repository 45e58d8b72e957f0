"""The one boundary between gridml and panda-client: every call, every translated error.

gridml submits through PanDA's own client library (``pandaclient.Client``, panda-client 2.x),
never a re-implementation. panda-client returns status tuples instead of raising; this module is
the only place that reads them and turns them into :class:`gridml.errors.ExecutorError` /
:class:`gridml.errors.DuplicateTaskError` with a message that says what happened and what to do.

Configuration and credentials are panda-client's own, read from the environment:
``PANDA_URL_SSL`` / ``PANDA_URL`` / ``PANDACACHE_URL`` (server), ``PANDA_AUTH=oidc`` with
``PANDA_AUTH_VO`` and a token (``OIDC_AUTH_TOKEN_FILE``, ``PANDA_AUTH_ID_TOKEN``,
``OIDC_AUTH_ID_TOKEN`` or the cached ``$PANDA_CONFIG_ROOT/.token``), or an X509 proxy
(``X509_USER_PROXY``, default ``/tmp/x509up_u<uid>``), ``PANDA_VERIFY_HOST``,
``PANDA_BEHIND_REAL_LB``. gridml never asks for, copies or stores a credential.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import logging
import os
import re
from types import ModuleType
from typing import Any

from gridml.errors import DuplicateTaskError, ExecutorError, NotFoundError

_TASK_ID = re.compile(r"jediTaskID=(\d+)")
_URL_VARS = ("PANDA_URL_SSL", "PANDA_URL", "PANDACACHE_URL")
_AUTH_HINT = ("check your PanDA credentials: PANDA_AUTH=oidc with PANDA_AUTH_VO and a token "
              "(OIDC_AUTH_TOKEN_FILE, or log in once with `pbook`), or a valid X509 proxy "
              "(voms-proxy-init, X509_USER_PROXY)")


def client() -> ModuleType:
    """``pandaclient.Client``, configured from the current environment.

    panda-client reads ``PANDA_URL_SSL`` & co. once, at import; when they changed since (a
    second server, tests), the module is re-imported so the environment is honoured."""
    try:
        from pandaclient import Client
    except ImportError as exc:  # panda-client comes with the grid extra
        from gridml.extras import missing_message

        if exc.name and exc.name.split(".")[0] != "pandaclient":
            raise
        raise ExecutorError(missing_message("pandaclient", "grid", "PanDA")) from None
    except OSError as exc:  # its import resolves the cache server's name unless told not to
        raise ExecutorError(f"panda-client could not resolve the PanDA cache server when it was "
                            f"imported: {exc}", hint="check your network/DNS, or set "
                            "PANDA_BEHIND_REAL_LB=1 (and PANDACACHE_URL) to skip the lookup") from None
    if _configured_for(Client) != _wanted():
        Client = importlib.reload(Client)
        Client._gridml_env = _wanted()  # type: ignore[attr-defined]
    _route_client_logging()
    return Client


def _route_client_logging() -> None:
    """panda-client's logger writes to stdout unless it already has a handler: give it one that
    does nothing, so its records go to gridml's log (controller.log) instead of the terminal."""
    logger = logging.getLogger("panda-client")
    if not logger.handlers:
        logger.addHandler(logging.NullHandler())


def _wanted() -> tuple[str | None, ...]:
    return tuple(os.environ.get(k) for k in _URL_VARS)


def _configured_for(mod: ModuleType) -> tuple[str | None, ...] | None:
    if not hasattr(mod, "_gridml_env"):
        mod._gridml_env = _wanted()  # type: ignore[attr-defined]  # first import read this env
    return mod._gridml_env  # type: ignore[no-any-return]


def server_url() -> str:
    """The PanDA server panda-client talks to (for messages and task parameters)."""
    return str(client().baseURLSSL)


def source_url() -> str:
    """``sourceURL`` as prun sets it (scheme://host[:port] of the cache server, where jobs would
    fetch a sandbox), from panda-client's variable and default, without importing the client."""
    url = os.environ.get("PANDACACHE_URL", "https://pandacache.cern.ch/server/panda")
    m = re.search(r"(https?://[^/]+)", url)
    return m.group(1) if m else url


def client_version() -> str:
    from gridml.extras import require

    require("pandaclient", "grid", feature="PanDA", error=ExecutorError)
    from pandaclient import PandaToolsPkgInfo

    return str(PandaToolsPkgInfo.release_version)


@contextlib.contextmanager
def _quiet() -> Any:
    """panda-client prints diagnostics on stdout (tracebacks of failed calls, raw replies): keep
    them off the terminal; the translated error says what happened."""
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        yield buf


def _call(fn: str, *args: Any, **kwargs: Any) -> tuple[int, Any]:
    """``Client.<fn>(...)`` -> its (status, output) tuple; status 0 means the server answered."""
    check_credentials()
    mod = client()
    with _quiet() as out:
        try:
            status, output = getattr(mod, fn)(*args, **kwargs)
        except SystemExit as exc:  # panda-client exits on broken auth settings
            raise ExecutorError(f"panda-client gave up in {fn}: {out.getvalue().strip() or exc}",
                                hint=_AUTH_HINT) from None
    return status, output


def _comm_error(fn: str, what: str) -> ExecutorError:
    """A status-255 answer: say whether the server is down or refused the request."""
    alive, msg = is_alive()
    if not alive and any(w in msg for w in ("SSL", "certificate", "credentials")):
        return ExecutorError(f"PanDA server {server_url()} did not accept the connection "
                             f"({what}): {msg}", hint=_AUTH_HINT)
    if not alive:
        return ExecutorError(f"PanDA server {server_url()} is not reachable ({what}): {msg}",
                             hint="check PANDA_URL_SSL / PANDA_URL and your network, then "
                                  "`gridml resume` the study; nothing was lost")
    return ExecutorError(f"PanDA server {server_url()} refused {what} ({fn})", hint=_AUTH_HINT)


def is_alive() -> tuple[bool, str]:
    """(True, message) when the server answers ``system/is_alive``."""
    mod = client()
    with _quiet() as out:
        status, msg = mod.hello()
    return status == 0, str(msg or out.getvalue()).strip()


def check_credentials() -> None:
    """Refuse early, instead of letting panda-client prompt or exit, when no credential is set."""
    if os.environ.get("PANDA_AUTH") not in ("oidc", "x509_no_grid") and _https():
        proxy = os.environ.get("X509_USER_PROXY") or f"/tmp/x509up_u{os.getuid()}"
        if not os.access(proxy, os.R_OK):
            raise ExecutorError(f"no X509 proxy at {proxy} and PANDA_AUTH is not oidc",
                                hint=_AUTH_HINT)
    if os.environ.get("PANDA_AUTH") == "oidc":
        if not (os.environ.get("PANDA_AUTH_VO") or os.environ.get("OIDC_AUTH_VO")):
            raise ExecutorError("PANDA_AUTH=oidc needs PANDA_AUTH_VO (e.g. atlas)", hint=_AUTH_HINT)
        if not _token_available():
            raise ExecutorError("PANDA_AUTH=oidc but no token was found", hint=_AUTH_HINT)


def _https() -> bool:
    return os.environ.get("PANDA_URL_SSL", "https://").startswith("https://")


def _token_available() -> bool:
    if any(os.environ.get(k) for k in ("PANDA_AUTH_ID_TOKEN", "OIDC_AUTH_TOKEN_FILE", "OIDC_AUTH_ID_TOKEN")):
        return True
    root = os.path.expanduser(os.environ.get("PANDA_CONFIG_ROOT", "."))
    return os.path.exists(os.path.join(root, ".token"))


# ---- task calls -------------------------------------------------------------------------------
def submit(params: dict[str, Any]) -> tuple[int, str]:
    """insertTaskParams -> (jediTaskID, server message).

    Codes 1-2 (the task name exists and is not finished: a resubmission) raise
    DuplicateTaskError carrying ``task_id``; other refusals raise ExecutorError."""
    name = params.get("taskName")
    status, output = _call("insertTaskParams", params, False, properErrorCode=True)
    if status != 0 or not isinstance(output, tuple):
        raise _comm_error("insertTaskParams", f"the submission of task {name}")
    code, message = output
    if code in (0, 3):
        return _task_id(message, name), str(message)
    if code in (1, 2):
        err = DuplicateTaskError(f"task {name} was submitted before: {message}")
        err.task_id = _task_id(message, name)  # type: ignore[attr-defined]
        raise err
    raise ExecutorError(f"PanDA refused task {name} (code {code}): {message}",
                        hint="fix what the server names (see `gridml submit --dry-run --json` for "
                             "the exact task parameters) and submit again")


def _task_id(message: Any, name: Any) -> int:
    m = _TASK_ID.search(str(message))
    if not m:
        raise ExecutorError(f"PanDA accepted task {name} but its reply has no jediTaskID: {message!r}")
    return int(m.group(1))


def task_status(task_id: int) -> str:
    """getTaskStatus -> the JEDI task status (``running``, ``done``, ...)."""
    status, output = _call("getTaskStatus", task_id)
    if status != 0 or output is None:
        _raise_lookup("getTaskStatus", task_id)
    return str(output)


def task_details(task_id: int) -> dict[str, Any]:
    """getJediTaskDetails -> {status, inDS, outDS, statistics, PandaID, ...}."""
    status, output = _call("getJediTaskDetails", {"jediTaskID": task_id}, False, True)
    if status != 0 or not isinstance(output, dict):
        _raise_lookup("getJediTaskDetails", task_id)
    return dict(output)


def task_params(task_id: int) -> dict[str, Any]:
    """getTaskParamsMap -> the task parameters as submitted."""
    status, output = _call("getTaskParamsMap", task_id)
    if status != 0 or not isinstance(output, dict):
        _raise_lookup("getTaskParamsMap", task_id)
    return dict(output)


def _raise_lookup(fn: str, task_id: int) -> None:
    alive, _msg = is_alive()
    if alive:
        raise NotFoundError(f"PanDA server {server_url()} has no task jediTaskID={task_id} ({fn})",
                            hint="the task may belong to another user or server (PANDA_URL_SSL)")
    raise _comm_error(fn, f"a lookup of jediTaskID={task_id}")


def kill(task_id: int) -> str:
    """killTask. A task already over is fine (the server rejects the command, nothing to do).

    panda-client passes on the server's message only when the command was rejected."""
    status, output = _call("killTask", task_id)
    if status != 0 or not isinstance(output, tuple):
        raise _comm_error("killTask", f"killing jediTaskID={task_id}")
    ok, detail = output
    if ok:
        return f"kill registered for jediTaskID={task_id}"
    message = str(detail)
    if "Command rejected" in message:  # code 4: finished, done, broken, aborted, failed ...
        return message
    if "not found" in message:
        raise NotFoundError(f"PanDA server {server_url()} has no task jediTaskID={task_id} to kill")
    raise ExecutorError(f"PanDA refused to kill jediTaskID={task_id}: {message}", hint=_AUTH_HINT)


def retry(task_id: int) -> str:
    """retryTask (a finished/failed task runs its failed jobs again). Returns the message."""
    status, output = _call("retryTask", task_id, False, True)
    if status != 0 or not isinstance(output, tuple):
        raise _comm_error("retryTask", f"retrying jediTaskID={task_id}")
    code, message = output
    if code != 0:
        raise ExecutorError(f"PanDA refused to retry jediTaskID={task_id} (code {code}): {message}",
                            hint="only finished or failed tasks can be retried")
    return str(message)


# ---- the cache -----------------------------------------------------------------------------
def put_file(path: str) -> str:
    """``Client.putFile`` (the PanDA cache, as prun uploads its sandbox): the name jobs fetch
    it by (the same file uploaded before keeps its first name: panda-client's reuseSandbox)."""
    status, output = _call("putFile", path, False, useCacheSrv=True, reuseSandbox=True)
    message = str(output)
    if status == 0 and message.startswith("NewFileName:"):
        return message.split(":")[-1]
    if status == 0 and message == "True":
        return os.path.basename(path)
    if status == 0:
        raise ExecutorError(f"PanDA's cache refused the sandbox {os.path.basename(path)}: {message}",
                            hint="keep the sandbox under 10 MB (payload.files)")
    raise _comm_error("putFile", f"the upload of the sandbox {os.path.basename(path)}")
