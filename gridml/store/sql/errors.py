"""Where the SQL store meets SQLAlchemy and its drivers: their errors become one
``StoreUnavailableError`` (one line naming the database, with the fix), raised once, here.

``guarded(cls)`` wraps every public method of the store (and its constructor); nothing above
the store ever sees a SQLAlchemy exception.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

from sqlalchemy.engine import make_url
from sqlalchemy.exc import (
    ArgumentError,
    DataError,
    IntegrityError,
    NoSuchModuleError,
    ProgrammingError,
    SQLAlchemyError,
)

from gridml.errors import StoreError, StoreUnavailableError

C = TypeVar("C", bound=type)
_URL_HINT = "use sqlite:///path.db or postgresql://user[:password]@host[:port]/db " \
            "(--db / GRIDML_DB_URL)"


def safe_url(url: str) -> str:
    """The URL with any password masked (URLs are printed, passwords never)."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:  # not a URL at all: say so without echoing a possible password
        return url.split("@")[-1] if "@" in url else url


def _reason(exc: BaseException) -> str:
    """The driver's own first line, without SQLAlchemy's wrapping and links."""
    orig = getattr(exc, "orig", None)
    text = str(orig if orig is not None else exc).strip()
    line = next((ln.strip() for ln in text.splitlines() if ln.strip()), type(exc).__name__)
    return line.split(" (Background on this error")[0]


def _hint(exc: BaseException, reason: str, url: str) -> str:
    low = reason.lower()
    if isinstance(exc, ArgumentError | NoSuchModuleError) or "could not parse" in low:
        return _URL_HINT
    if "locked" in low or "busy" in low:
        return ("another process holds the SQLite file's lock: wait for it, or stop it "
                "(`gridml serve` and a running `gridml submit` share the file safely)")
    if "unable to open database file" in low or "readonly" in low or "read-only" in low:
        return f"check that the folder of {safe_url(url)} exists and is writable"
    if "password" in low or "authentication" in low or "role" in low:
        return "check the user and password in the database URL"
    if "does not exist" in low:
        return "create the database first (createdb NAME), or fix its name in the URL"
    return ("check that the database server is running and reachable from here, and the URL "
            "(--db / GRIDML_DB_URL)")


def unavailable(exc: BaseException, url: str) -> StoreError:
    """The gridml error for ``exc``: StoreUnavailableError for the database being unusable
    (locked, unreachable, bad URL, no driver), StoreError for data it refused."""
    reason = _reason(exc)
    if isinstance(exc, DataError | IntegrityError | ProgrammingError):
        return StoreError(f"metrics database {safe_url(url)} refused the data: {reason}",
                          hint="a value the database cannot store (e.g. NaN in hyperparameters)")
    error = StoreUnavailableError(f"metrics database {safe_url(url)}: {reason}",
                                  hint=_hint(exc, reason, url))
    error.__cause__ = exc
    return error


def _guard(fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(self, *args, **kwargs)
        except (SQLAlchemyError, OSError) as exc:  # OSError: the SQLite folder, lock files
            raise unavailable(exc, getattr(self, "url", "") or str(args[0] if args else "")) \
                from exc

    return wrapper


def guarded(cls: C) -> C:
    """Translate SQLAlchemy errors in every public method of ``cls`` and in ``__init__``."""
    for name, member in list(vars(cls).items()):
        if callable(member) and (not name.startswith("_") or name == "__init__"):
            setattr(cls, name, _guard(member))
    return cls
