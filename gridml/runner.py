"""Running a campaign from the CLI: the store, the embedded API, the display; the campaign itself
is put together by :mod:`gridml.assemble` (as for the dry run and the server)."""

from __future__ import annotations

import json
import logging
import os
import tempfile
from contextlib import ExitStack
from pathlib import Path
from dataclasses import replace
from typing import Any, cast

from rich.console import Console
from rich.live import Live
from rich.table import Table

from gridml import assemble, plots
from gridml.data.base import DataManager
from gridml.controller import check_same_campaign
from gridml.errors import GridmlError, NotFoundError
from gridml.layout import RunsLayout
from gridml.server.embedded import EmbeddedServer
from gridml.settings import settings
from gridml.spec import LoadedSpec
from gridml.store import CampaignStore, MetricsStore, StoreReader, Study, Trial, best_trial, spec_of
from gridml.store.sql import open_sql_store

console = Console(stderr=True)


def progress_table(study: Study, trials: list[Trial]) -> Table:
    search = spec_of(study).search
    table = Table(title=f"study {study.name}: {len(trials)}/{search.max_trials} trials, "
                        f"{search.objective} ({search.direction})")
    for col in ("trial", "state", "epochs", search.objective):
        table.add_column(col)
    table.add_column("hyperparameters", overflow="fold")  # values folded, never cut to "…"
    best = best_trial(study, trials)
    for t in trials[-20:]:
        obj = f"{t.objective:.4f}" if t.objective is not None else "-"
        mark = " *" if best is not None and t.id == best.id else ""
        hp = " ".join(f"{k}={_short(v)}" for k, v in t.hparams.items())
        table.add_row(str(t.number), t.state, str(t.epochs_done), obj + mark, hp)
    return table


def _short(v: Any) -> str:
    return f"{v:.3g}" if isinstance(v, float) else str(v)


def dry_run(loaded: LoadedSpec, data: DataManager,
            real: StoreReader | None | bool = True) -> list[dict[str, Any]]:
    """The task parameters of the first batch. The real store (``real``: a reader; True: the
    local one, opened read-only; None: none) is read, never written: a study of the same name
    made from another spec is refused as `gridml submit` would, and ``search.warm_start``
    studies are read from it; what the campaign writes goes to a throwaway store."""

    reader = _read_only_store() if real is True else real or None
    try:
        if reader is not None:
            try:
                check_same_campaign(reader.get_study(loaded.spec.name), loaded)
            except NotFoundError:
                pass
        with tempfile.TemporaryDirectory(prefix="gridml-dryrun-") as tmp:
            scratch = open_sql_store(f"sqlite:///{tmp}/dry.db")
            store = cast(CampaignStore, _ReadThrough(scratch, reader, loaded.spec.name))
            campaign, backend = assemble.campaign(loaded, store, RunsLayout(Path(tmp) / "runs"),
                                                  data=data, api_url="http://SERVER", dry_run=True)
            campaign.step()
            scratch.close()
            return list(backend.rendered or [])
    finally:
        if reader is not None and real is True:
            reader.close()


def _read_only_store() -> StoreReader | None:
    """The local metrics store, for reading only: not created when it does not exist yet,
    not migrated (None: no store, so no earlier study)."""
    from gridml.store.sql import SqlStore
    from gridml.store.sql.engine import is_sqlite, sqlite_path

    url = settings().db_url
    if is_sqlite(url):
        path = sqlite_path(url)
        if path is None or not path.is_file():
            return None
    return SqlStore(url)


class _ReadThrough:
    """The dry run's store: everything goes to ``scratch`` (throwaway), except the other
    studies of ``real`` (``search.warm_start``), read from it (ids negated, so they never meet
    the scratch store's)."""

    def __init__(self, scratch: CampaignStore, real: StoreReader | None, own: str) -> None:
        self._scratch, self._real, self._own = scratch, real, own

    def get_study(self, ref: str | int) -> Study:
        try:
            if not (isinstance(ref, int) and ref < 0):
                return self._scratch.get_study(ref)
        except NotFoundError:
            if self._real is None or ref == self._own:
                raise
        assert self._real is not None
        study = self._real.get_study(-ref if isinstance(ref, int) else ref)
        return replace(study, id=-study.id)

    def list_trials(self, study_id: int, states: tuple[str, ...] | None = None) -> list[Trial]:
        if study_id < 0 and self._real is not None:
            return self._real.list_trials(-study_id, states)
        return self._scratch.list_trials(study_id, states)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._scratch, name)


def run_local(loaded: LoadedSpec, data: DataManager, *, quiet: bool = False,
              fixed: list[dict[str, Any]] | None = None) -> tuple[Study, MetricsStore]:
    """Run the campaign in the foreground with the embedded API; returns when it is over.

    ``fixed``: hyperparameter points to run (in order) instead of asking the searcher, for a
    study that has no trials yet (the scaling study)."""

    cfg = settings()
    store = open_sql_store(cfg.db_url)  # a campaign writes: the SQL store
    layout = RunsLayout(cfg.runs_dir)
    paths = layout.study(loaded.spec.name)
    _log_to(paths.controller_log)
    with ExitStack() as stack:
        server = _embedded_server(cfg.db_url, paths.api_record)
        stack.callback(server.stop)
        campaign, _backend = assemble.campaign(loaded, store, layout, data=data, api_url=server.url)
        record = _record_api(paths.api_record, str(server.url),
                             _study_token(store, campaign.study, paths.api_record))
        if loaded.spec.search.algorithm == "external":
            console.print(f"external optimizer: API {server.url}  study {campaign.study.name}  "
                          f"token {record['token']}  (also in {paths.api_record})")
        live = stack.enter_context(Live(console=console, refresh_per_second=2, transient=False)) \
            if not quiet else None
        if live:
            campaign.on_cycle = lambda s, t: live.update(progress_table(s, t))
        if fixed and not store.list_trials(campaign.study.id):
            for point in fixed:
                store.create_trial(campaign.study.id, point, source="fixed")
        study = campaign.run()
    finish_study(store, study, data, loaded)
    return study, store


def _embedded_server(db_url: str, record: Path) -> Any:
    """The in-process API, on the port it had last time (``record``: the study's api.json) if
    free: payloads still running from before a controller crash keep reporting to the URL in
    their trial file."""

    try:
        port = int(json.loads(record.read_text())["port"])
    except (OSError, ValueError, KeyError):
        port = 0
    server = EmbeddedServer(db_url, port=port)
    try:
        server.start()
    except OSError:  # taken by something else now: any free port
        server = EmbeddedServer(db_url)
        server.start()
    return server


def _study_token(store: Any, study: Study, record: Path) -> str:
    """A study token for an external optimizer: the study's first one (just created), the one
    in ``api.json`` if still valid, else one more."""
    if study.token:
        return study.token
    try:
        old = json.loads(record.read_text()).get("token")
    except (OSError, ValueError, AttributeError):
        old = None
    if isinstance(old, str) and store.check_study_token(study.id, old):
        return old
    return str(store.issue_study_token(study.id))


def _record_api(record: Path, url: str, token: str) -> dict[str, Any]:
    """``runs/<study>/api.json``: ``{"url", "token", "port"}`` (the port: the next run takes it
    again if free), readable by the user only (it holds the study token)."""
    data = {"url": url, "token": token, "port": int(url.rsplit(":", 1)[1])}
    record.parent.mkdir(parents=True, exist_ok=True)
    tmp = record.with_suffix(".tmp")
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(json.dumps(data))
    tmp.rename(record)
    return data


def finish_study(store: MetricsStore, study: Study, data: DataManager, loaded: LoadedSpec) -> None:
    """Convergence plot, stored with the study's outputs."""
    trials = store.list_trials(study.id)
    path = RunsLayout(settings().runs_dir).study(study.name).convergence_plot
    if plots.convergence_plot(trials, loaded.spec.search.objective, loaded.spec.search.direction, path):
        try:
            data.upload([path], loaded.output_dataset, names=[f"{study.name}.convergence.png"],
                        metadata={"study": study.name, "kind": "convergence"})
        except GridmlError as exc:
            console.print(f"[yellow]convergence plot not stored: {exc}[/]")


def _log_to(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(path)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger("gridml")
    root.setLevel(logging.INFO)
    if not any(isinstance(h, logging.FileHandler) and h.baseFilename == str(path) for h in root.handlers):
        root.addHandler(handler)
