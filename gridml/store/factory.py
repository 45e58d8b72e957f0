"""``open_store(url_or_server)``: the one place that chooses a backend.

    sqlite:///path.db, postgresql://user@host/db  -> SqlStore (migrated to the newest schema)
    http://host:port, https://...                 -> RemoteStore (read-only, over the API)
    None                                          -> settings().db_url (GRIDML_DB_URL or the
                                                     SQLite file in GRIDML_HOME)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gridml.errors import StoreError
from gridml.settings import settings

if TYPE_CHECKING:
    from gridml.store.remote import RemoteStore  # lazy: httpx only for a remote store
    from gridml.store.sql import SqlStore


def open_store(url: str | None = None, *, token: str | None = None) -> SqlStore | RemoteStore:
    """The store at ``url`` (see the module). ``token``: bearer token for a remote server.
    The backends are imported here, not above: SQLAlchemy / httpx only when one is opened."""
    if url is None:

        url = settings().db_url
    scheme = url.split(":", 1)[0].lower() if ":" in url else ""
    if scheme in ("http", "https"):
        from gridml.store.remote import RemoteStore

        return RemoteStore(url, token)
    if scheme.startswith(("sqlite", "postgres")):
        from gridml.store.sql import open_sql_store  # lazy: SQLAlchemy only for a SQL store

        return open_sql_store(url)
    raise StoreError(f"metrics store URL {url!r}: unknown kind",
                     hint="use sqlite:///path.db, postgresql://user@host/db or the http(s):// "
                          "address of a `gridml serve`")
