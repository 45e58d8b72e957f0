"""The one place a campaign is put together: for `gridml submit`/`resume` (:mod:`gridml.runner`),
for ``--dry-run`` and for the server's controller (:mod:`gridml.service`).

A campaign is its spec, its store, its data manager, its backend (an executor, or a study driver
for phpo, whose own service proposes the points), the backend's journal folder
(``runs/.journal/<backend>``, :class:`~gridml.layout.RunsLayout`), the API URL its payloads
report to, and the :class:`~gridml.controller.Campaign` loop over them. A dry run is the same
campaign on a backend that renders what it would submit and submits nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gridml import executors
from gridml.controller import Campaign, data_manager_for
from gridml.data.base import DataManager
from gridml.executors.base import Executor, StudyDriver
from gridml.executors.dryrun import DryRunExecutor
from gridml.layout import RunsLayout
from gridml.spec import LoadedSpec
from gridml.store import CampaignStore


@dataclass
class Backend:
    """What runs a campaign's trials: an executor or a study driver (exactly one)."""

    executor: Executor | None = None
    driver: StudyDriver | None = None
    rendered: list[dict[str, Any]] | None = None  # a dry run's: what would be submitted

    def close(self) -> None:
        if self.executor is not None:
            self.executor.close()
        if self.driver is not None:
            self.driver.close()


def backend(name: str, data: DataManager, layout: RunsLayout, *, dry_run: bool = False,
            options: dict[str, Any] | None = None) -> Backend:
    """The backend ``name`` (``backend.executor``) for a campaign on ``data``, journaling under
    ``layout``; ``dry_run``: one that renders what it would submit and submits nothing."""
    journal = layout.journal(name)
    if name == "phpo":  # one HPO task for the whole study: iDDS proposes the points
        from gridml.phpo.driver import PandaClientCalls, PhpoDriver, RenderingClient

        if dry_run:
            client = RenderingClient()
            return Backend(driver=PhpoDriver(data, client, journal), rendered=client.rendered)
        return Backend(driver=PhpoDriver(data, PandaClientCalls(), journal, **(options or {})))
    executor = executors.create(name, data=data, journal=journal, dry_run=dry_run,
                                **(options or {}))
    rendered = executor.rendered if isinstance(executor, DryRunExecutor) else None
    return Backend(executor=executor, rendered=rendered)


def campaign(loaded: LoadedSpec, store: CampaignStore, layout: RunsLayout, *,
             data: DataManager | None = None, api_url: str | None = None, dry_run: bool = False,
             options: dict[str, Any] | None = None) -> tuple[Campaign, Backend]:
    """The campaign of ``loaded`` in ``store`` (its study created or found again), its state under
    ``layout``, on ``data`` (default: the data backend its spec names), its payloads reporting to
    ``api_url``; ``options``: the backend's own (e.g. the local executor's ``grace_s``)."""
    data = data if data is not None else data_manager_for(loaded.spec)
    chosen = backend(loaded.spec.backend.executor, data, layout, dry_run=dry_run, options=options)
    return Campaign(loaded, store, chosen.executor, data, layout.runs_dir, api_url=api_url,
                    driver=chosen.driver), chosen
