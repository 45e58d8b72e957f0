"""The Rucio boundary: every rucio-clients call goes through :func:`call`, which retries transient
failures with exponential backoff and translates Rucio's exceptions, once, into gridml's errors
(what happened, and what to do).

    rucio / requests exception                         gridml error
    DataIdentifierNotFound, ScopeNotFound            -> NotFoundError (names the DID and the fix)
    CannotAuthenticate, NoAuthInformation            -> DataError: check RUCIO_CONFIG [client]
    AccessDenied, ScopeAccessDenied, RSEAccessDenied -> DataError: scope / RSE your account may use
    InsufficientAccountLimit, RSEOverQuota, Full...  -> DataError: quota, another RSE
    DataIdentifierAlreadyExists, FileAlreadyExists   -> DataError: DIDs are immutable
    RSENotFound, InvalidRSEExpression                -> DataError: --rse / GRIDML_RUCIO_RSE
    FileConsistencyMismatch, ChecksumCalculation...  -> ChecksumError
    ServerConnectionException, ServiceUnavailable,
    requests ConnectionError/Timeout, HTTP 502-504   -> retried (*), then DataError: server down
    ConfigNotFound                                   -> DataError: set RUCIO_CONFIG
    any other RucioException                         -> DataError with Rucio's own words
(*) retried: the transient ones. Settings: $GRIDML_RUCIO_RETRIES (default 6) and
$GRIDML_RUCIO_BACKOFF (first wait in seconds, default 0.5, doubled each time up to 10 s: about
25 s in all before giving up).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from typing import Any, TypeVar

from gridml.data.base import DID
from gridml.data.common import not_found
from gridml.errors import ChecksumError, DataError, GridmlError

T = TypeVar("T")
MAX_WAIT_S = 10.0  # backoff doubles up to this
log = logging.getLogger("gridml.data.rucio")

TRANSIENT = {"ServerConnectionException", "ServiceUnavailable", "ResourceTemporaryUnavailable",
             "RSENotConnected", "ReplicationRuleCreationTemporaryFailed", "DatabaseException",
             "ConnectionError", "Timeout", "ReadTimeout", "ConnectTimeout", "ChunkedEncodingError"}

# exception class name -> (what happened, what to do); {action} {did} {where} {account} filled in
_KNOWN: dict[str, tuple[str, str]] = {
    "CannotAuthenticate": ("{where} refused the credentials of account {account}",
                           "check the [client] auth settings (auth_type, username/password, "
                           "certificate or token) in $RUCIO_CONFIG and $RUCIO_ACCOUNT"),
    "NoAuthInformation": ("no Rucio credentials found", "set auth_type and its credentials in "
                          "the [client] section of $RUCIO_CONFIG"),
    "AccessDenied": ("account {account} may not {action} {did} on {where}",
                     "use a scope your account owns (e.g. user.{account}) and an RSE it may write "
                     "to (--rse / $GRIDML_RUCIO_RSE)"),
    "InsufficientAccountLimit": ("account {account} has no quota left to {action} {did}",
                                 "free space or ask for quota, or choose another RSE with --rse "
                                 "/ $GRIDML_RUCIO_RSE"),
    "DataIdentifierAlreadyExists": ("{did} already exists on {where} with other content",
                                    "a DID is immutable: upload the new version under a new name"),
    "RSENotFound": ("{where} has no RSE of that name ({action} {did})",
                    "list RSEs with `rucio list-rses`; set --rse or $GRIDML_RUCIO_RSE"),
    "ServerConnectionException": ("cannot reach {where} ({action} {did})",
                                  "check rucio_host/auth_host in $RUCIO_CONFIG and that the "
                                  "server is up; gridml retried with backoff before giving up"),
    "ConfigNotFound": ("no Rucio client configuration found",
                       "set RUCIO_CONFIG to your rucio.cfg (a [client] section, no [database])"),
}
_ALIASES = {
    "ScopeAccessDenied": "AccessDenied", "RSEAccessDenied": "AccessDenied",
    "RSEWriteBlocked": "AccessDenied", "RSEOverQuota": "InsufficientAccountLimit",
    "FullStorage": "InsufficientAccountLimit", "FileAlreadyExists": "DataIdentifierAlreadyExists",
    "InvalidRSEExpression": "RSENotFound", "ServiceUnavailable": "ServerConnectionException",
    "ConnectionError": "ServerConnectionException", "Timeout": "ServerConnectionException",
    "ReadTimeout": "ServerConnectionException", "ConnectTimeout": "ServerConnectionException"}


def _details(exc: BaseException) -> str:
    """Rucio's message on one line (its exceptions carry 'Details: ...' on a second line)."""
    text = " ".join(str(exc).split())
    return text.split("Details: ", 1)[-1] if "Details: " in text else text


def translate(exc: BaseException, *, action: str, did: DID | str | None, where: str,
              account: str | None) -> GridmlError:
    """One foreign exception -> the matching gridml error (see the module docstring)."""
    if isinstance(exc, GridmlError):
        return exc
    name = type(exc).__name__
    key = _ALIASES.get(name, name)
    did_text = str(did) if did else ""
    if key in ("DataIdentifierNotFound", "ScopeNotFound") and isinstance(did, DID):
        return not_found(did, where)
    if key in ("FileConsistencyMismatch", "ChecksumCalculationError"):
        return ChecksumError(f"{action} {did_text}: checksum mismatch: {_details(exc)}",
                             hint="the stored or downloaded copy is corrupt: retry; if it "
                                  "persists, tell the RSE's administrators")
    what, fix = _KNOWN.get(key, (f"Rucio refused to {{action}} {{did}} on {{where}}: {name}",
                                 "see Rucio's message; `rucio -v` shows more"))
    fill = dict(action=action, did=did_text, where=where, account=account or "?")
    return DataError(f"{what.format(**fill)}: {_details(exc)}", hint=fix.format(**fill))


def is_transient(exc: BaseException) -> bool:
    if type(exc).__name__ in TRANSIENT:
        return True
    # a gateway that lost the server; a plain 500 is a server-side bug, retrying will not help
    text = str(exc)
    return type(exc).__name__ == "RucioException" and any(
        f"http status code: {code}" in text for code in (502, 503, 504))


def call(fn: Callable[[], T], *, action: str, did: DID | str | None, where: str,
         account: str | None = None) -> T:
    """Run one Rucio operation: retry transient failures with backoff, translate the rest."""
    retries = int(os.environ.get("GRIDML_RUCIO_RETRIES", "6"))
    wait = float(os.environ.get("GRIDML_RUCIO_BACKOFF", "0.5"))
    for attempt in range(retries + 1):
        try:
            return fn()
        except Exception as exc:
            if attempt < retries and is_transient(exc):
                log.warning("%s %s: %s; retrying in %.1f s (%d/%d)", action, did or "",
                            _details(exc), wait, attempt + 1, retries)
                time.sleep(wait)
                wait = min(2 * wait, MAX_WAIT_S)
                continue
            raise translate(exc, action=action, did=did, where=where, account=account) from exc
    raise AssertionError("unreachable")


class RucioLog:
    """rucio-clients wants a logger that is callable *and* has .log (41.5.1 calls both).
    Its messages go to DEBUG: what failed for good reaches the user as one gridml error."""

    def __call__(self, level: int, msg: str, *args: Any, **kw: Any) -> None:
        log.debug("rucio %s: " + msg, logging.getLevelName(level), *args, **kw)

    log = __call__
