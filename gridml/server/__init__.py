"""The gridml server: the metrics API (``app``) on a store, the dashboard, the embedded runner.

Import the pieces you need (``gridml.server.app.create_app``,
``gridml.server.embedded.EmbeddedServer``); this package itself imports nothing heavy. It sits
on ``gridml.store`` and imports nothing of the campaign layers (controller, runner, service,
CLI): `gridml serve` composes them at the top (``gridml.serve``).
"""
