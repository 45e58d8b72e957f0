"""Who may create studies on a `gridml serve`: the holder of its admin token.

At start `gridml serve` takes the admin token given (``--admin-token``, $GRIDML_ADMIN_TOKEN), or
the one kept in its token file (``$GRIDML_HOME/admin-token``, or ``--admin-token-file``), or makes
a new one; it keeps it in that file (mode 0600) and prints it. ``POST /api/v1/studies`` then needs
``Authorization: Bearer <admin token>``. Only a server listening on loopback may, with the explicit
``--allow-anonymous-studies``, also take study creations without a token (from loopback clients).
"""

from __future__ import annotations

import ipaddress
import secrets
from pathlib import Path

from gridml.errors import UsageError
from gridml.settings import read_admin_token, settings, write_admin_token

LOOPBACK_NAMES = ("localhost",)


def new_token() -> str:
    return "gma_" + secrets.token_urlsafe(32)


def is_loopback(host: str | None) -> bool:
    if not host:
        return False
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def creation_policy(token: str | None, token_file: Path | None, anonymous: bool,
                    host: str) -> tuple[str, Path, str]:
    """(the admin token, the file keeping it, a line saying who may create studies)."""
    if anonymous and not is_loopback(host):
        raise UsageError(f"--allow-anonymous-studies: the server listens on {host}, not on "
                         "loopback; anonymous study creation is for this machine only",
                         hint="use --host 127.0.0.1, or give clients the admin token")
    path = token_file or settings().admin_token_file
    token = (token or "").strip() or read_admin_token(path) or new_token()
    if any(c.isspace() for c in token) or len(token) < 16:
        raise UsageError("the admin token must be one word of at least 16 characters",
                         hint="leave it out: `gridml serve` makes one")
    write_admin_token(path, token)
    who = f"the admin token {token} (kept in {path}, mode 0600)"
    if anonymous:
        who += ", or no token from this machine (--allow-anonymous-studies)"
    return token, path, f"creating a study needs {who}"
