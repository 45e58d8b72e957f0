"""The server's controller: drives every grid campaign (executor other than local) it holds.

`gridml serve` runs a ``CampaignService`` beside the API. Each cycle it takes every study in
state ``running`` whose spec names a non-local executor, rebuilds its Campaign from the store
(nothing is kept in memory that the store does not have) and runs one step: poll the executor,
fail trials silent past the heartbeat timeout, retry failed ones, ingest spools, ask, submit.
The campaign is put together by :mod:`gridml.assemble`, as for `gridml submit`. Each study is
isolated: one that raises anything but a GridmlError (which is logged and retried next cycle:
PanDA or the data store may be back) is logged with its traceback and set to ``failed`` (a study
state of its own: not a Ctrl-C ``stopped``), and the cycle goes on with the other studies.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any

from gridml import assemble
from gridml.controller import Campaign, loaded_from_study
from gridml.errors import GridmlError
from gridml.layout import RunsLayout
from gridml.store import CampaignStore, Study

log = logging.getLogger("gridml.service")


def materialise_model(study: Study, runs_dir: Path) -> None:
    """Write a study's model source (sent by a remote `gridml submit`) where its spec points."""
    payload = study.spec.get("payload", {})
    source = study.spec.get("x_model_source")
    if source and not Path(payload.get("model", "")).is_file():
        path = RunsLayout(runs_dir).study(study.name).model_dir / Path(payload.get("model", "model.py")).name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(source)
        payload["model"] = str(path)


class CampaignService:
    def __init__(self, store: CampaignStore, runs_dir: Path, api_url: str, poll_s: float = 10.0,
                 executor_options: dict[str, Any] | None = None) -> None:
        self.store, self.runs_dir, self.api_url, self.poll_s = store, runs_dir, api_url, poll_s
        self.executor_options = executor_options or {}
        self._backends: dict[int, assemble.Backend] = {}  # study id -> its campaign's backend
        self._campaigns: dict[int, Campaign] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _campaign(self, study: Study) -> Campaign:
        if study.id not in self._campaigns:

            materialise_model(study, self.runs_dir)
            loaded = loaded_from_study(study)
            name = loaded.spec.backend.executor
            campaign, backend = assemble.campaign(
                loaded, self.store, RunsLayout(self.runs_dir), api_url=self.api_url,
                options=self.executor_options.get(name, {}))
            self._backends[study.id] = backend
            self._campaigns[study.id] = campaign
        return self._campaigns[study.id]

    def run_once(self) -> int:
        """One step of every grid campaign; returns how many are still running. One study that
        cannot be run (a spec the server cannot build a campaign from, a backend that fails in
        a way no one foresaw) is logged and set ``failed``: it never stops the others."""
        running = 0
        for study in self.store.list_studies():
            # (closed: its external optimizer is done; the campaign still runs what is queued;
            # stopping: `gridml stop`, its trials end and the step sets it stopped)
            if study.state not in ("running", "closed", "stopping"):
                continue
            try:
                if study.spec.get("backend", {}).get("executor", "local") == "local":
                    continue
                campaign = self._campaign(study)
                if campaign.step():
                    if self.store.get_study(study.id).state != "stopped":
                        # (the same certain failure again and again: failed, as `gridml submit` ends it)
                        self.store.set_study_state(
                            study.id, "failed" if campaign.stopped_by else "finished")
                    self._campaigns.pop(study.id, None)
                else:
                    running += 1
            except GridmlError as exc:  # e.g. PanDA or the data store unreachable: next cycle
                log.error("study %s: %s", study.name, exc)
                running += 1
            except Exception:  # a bug or a spec no campaign can be built from: this study only
                log.exception("study %s cannot be run: failed (the other studies go on)",
                              study.name)
                self._give_up(study)
        return running

    def _give_up(self, study: Study) -> None:
        """Stop driving ``study``: its state becomes ``failed`` (it is no longer taken up)."""
        self._campaigns.pop(study.id, None)
        backend = self._backends.pop(study.id, None)
        try:
            if backend is not None:
                backend.close()
            self.store.set_study_state(study.id, "failed")
        except Exception:
            log.exception("study %s: not marked failed", study.name)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="gridml-controller", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.run_once()
            except Exception:
                log.exception("controller cycle failed")
            self._stop.wait(self.poll_s)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        for backend in self._backends.values():
            backend.close()
