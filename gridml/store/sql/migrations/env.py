"""Alembic environment: gridml passes an open connection in ``config.attributes``.

Run by ``gridml.store.sql.engine.migrate`` (on every ``open_store``); for hand use::

    alembic -x url=sqlite:///path/gridml.db -c /dev/null upgrade head   # script_location: here
"""

from __future__ import annotations

from alembic import context
from sqlalchemy import create_engine

from gridml.store.sql.models import Base

config = context.config
target_metadata = Base.metadata


def run_online() -> None:
    conn = config.attributes.get("connection")
    if conn is None:
        url = context.get_x_argument(as_dictionary=True)["url"]
        with create_engine(url).connect() as fresh:
            _run(fresh)
            fresh.commit()
        return
    _run(conn)


def _run(conn) -> None:  # type: ignore[no-untyped-def]
    sqlite = conn.dialect.name == "sqlite"
    context.configure(connection=conn, target_metadata=target_metadata,
                      render_as_batch=sqlite, compare_type=True)
    with context.begin_transaction():
        context.run_migrations()


if context.is_offline_mode():
    raise SystemExit("gridml migrations run online only (they need a connection)")
run_online()
