"""The metrics store on SQLAlchemy: ``open_store(url) -> SqlStore`` (see ``gridml.store``)."""

from gridml.server.db.store import SqlStore, open_store

__all__ = ["SqlStore", "open_store"]
