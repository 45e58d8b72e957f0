"""``gridml serve``: the metrics API (+ dashboard) as a long-running service.

Composed here, at the top beside the CLI (which registers :func:`serve` as ``gridml serve``),
from the layers below: the store (``gridml.store``), the API (``gridml.server``) and the
controller (``gridml.service``); ``gridml.server`` itself knows nothing of the controller. Migrations run once in this process before
any worker starts; each uvicorn worker then opens its own connection pool
(``gridml.server.app:app_from_env``). The controller loop for grid campaigns
(``gridml.service.CampaignService``) runs in a thread of this process, once per server whatever
the number of workers. TLS: run behind a reverse proxy (docs/server.md).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

LOOPBACK = ("127.0.0.1", "localhost", "::1")


def serve(
    host: Annotated[str, typer.Option(help="address to listen on (127.0.0.1: this machine only)")]
    = "127.0.0.1",
    port: Annotated[int, typer.Option(help="TCP port")] = 8765,
    db: Annotated[str | None, typer.Option(
        help="database URL: sqlite:///path.db or postgresql://user@host/db "
             "(default: $GRIDML_DB_URL or $GRIDML_HOME/gridml.db)")] = None,
    workers: Annotated[int, typer.Option(min=1, max=64, help="uvicorn worker processes")] = 1,
    open_reads: Annotated[bool | None, typer.Option(
        "--open-reads/--closed-reads",
        help="let GET routes and the dashboard work without a token (default: only when "
             "listening on loopback)")] = None,
    controller: Annotated[bool, typer.Option(
        "--controller/--no-controller",
        help="drive the grid campaigns (executor other than local) registered here; run one "
             "controller per database")] = True,
    public_url: Annotated[str | None, typer.Option(
        help="the URL payloads on worker nodes post to (default: http://HOST:PORT); behind a "
             "reverse proxy, its https:// address")] = None,
    poll: Annotated[float, typer.Option(help="seconds between controller cycles")] = 10.0,
    create_token: Annotated[str | None, typer.Option(
        "--admin-token", "--create-token", envvar=["GRIDML_ADMIN_TOKEN", "GRIDML_CREATE_TOKEN"],
        show_default=False, help="the admin token creating a study needs (default: the one in "
        "the token file, or a new one; printed at start)")] = None,
    admin_token_file: Annotated[Path | None, typer.Option(
        show_default=False, help="where the admin token is kept, mode 0600 (default: "
        "$GRIDML_HOME/admin-token)")] = None,
    allow_anonymous_studies: Annotated[bool, typer.Option(
        help="also create studies without a token for clients on this machine (only when "
        "listening on loopback)")] = False,
    max_body: Annotated[str, typer.Option(
        help="largest request body taken (larger: 413), e.g. 8MiB, 500kB")] = "8MiB",
) -> None:
    """Run the gridml server: metrics API under /api/v1, dashboard at /, metrics at /metrics."""
    import uvicorn

    from gridml.settings import settings
    from gridml.store.sql import open_sql_store

    from gridml.errors import UsageError
    from gridml.server.admin import creation_policy
    from gridml.server.limits import parse_size

    try:
        os.environ["GRIDML_SERVE_MAX_BODY"] = str(parse_size(max_body))
    except ValueError as exc:
        raise UsageError(f"--max-body: {exc}") from None
    create_token, _, who = creation_policy(create_token, admin_token_file,
                                           allow_anonymous_studies, host)
    os.environ["GRIDML_SERVE_ANONYMOUS_STUDIES"] = "1" if allow_anonymous_studies else "0"
    url = db or settings().db_url
    open_sql_store(url).close()  # migrate once, before the workers start
    reads = host in LOOPBACK if open_reads is None else open_reads
    os.environ["GRIDML_SERVE_DB"] = url
    os.environ["GRIDML_SERVE_OPEN_READS"] = "1" if reads else "0"
    if create_token:
        os.environ["GRIDML_CREATE_TOKEN"] = create_token
    typer.echo(f"gridml server on http://{host}:{port} (database {_safe(url)}, "
               f"{workers} worker(s), reads {'open' if reads else 'need a token'}, "
               f"controller {'on' if controller else 'off'}, body limit {max_body}); {who}")
    service = _start_controller(url, public_url or f"http://{host}:{port}", poll) \
        if controller else None
    try:
        uvicorn.run("gridml.server.app:app_from_env", factory=True, host=host, port=port,
                    workers=workers, log_level="warning", access_log=False)
    finally:
        if service is not None:
            service.stop()


def _start_controller(url: str, api_url: str, poll: float):  # type: ignore[no-untyped-def]
    """The server's controller loop (grid campaigns), in a thread of this process."""
    from gridml.service import CampaignService
    from gridml.settings import settings
    from gridml.store.sql import open_sql_store

    service = CampaignService(open_sql_store(url), settings().runs_dir, api_url, poll_s=poll)
    service.start()
    return service


def _safe(url: str) -> str:
    """The URL with any password masked (URLs are printed, passwords never)."""
    from gridml.store.sql.errors import safe_url

    return safe_url(url)


if __name__ == "__main__":  # `python -m gridml.serve ...`: how ServerProcess starts it
    typer.run(serve)
