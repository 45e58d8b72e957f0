"""The gridml server: metrics store (``db``), REST API (``app``), dashboard, embedded runner.

Import the pieces you need (``gridml.server.db.open_store``, ``gridml.server.app.create_app``,
``gridml.server.embedded.EmbeddedServer``); this package itself imports nothing heavy.
"""
