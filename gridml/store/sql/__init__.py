"""The metrics store on SQLAlchemy (SQLite or PostgreSQL): ``open_sql_store(url) -> SqlStore``;
its tables (``models``) and Alembic migrations (``migrations/``). Use ``gridml.store.open_store``."""

from gridml.store.sql.store import SqlStore, open_sql_store

__all__ = ["SqlStore", "open_sql_store"]
