"""The server's controller: drives every grid campaign (executor other than local) it holds.

`gridml serve` runs a ``CampaignService`` beside the API. Each cycle it takes every study in
state ``running`` whose spec names a non-local executor, rebuilds its Campaign from the store
(nothing is kept in memory that the store does not have) and runs one step: poll the executor,
fail trials silent past the heartbeat timeout, retry failed ones, ingest spools, ask, submit.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any

from gridml import executors
from gridml.controller import Campaign, data_manager_for, loaded_from_study
from gridml.errors import GridmlError
from gridml.store import CampaignStore, Study

log = logging.getLogger("gridml.service")


def materialise_model(study: Study, runs_dir: Path) -> None:
    """Write a study's model source (sent by a remote `gridml submit`) where its spec points."""
    payload = study.spec.get("payload", {})
    source = study.spec.get("x_model_source")
    if source and not Path(payload.get("model", "")).is_file():
        path = runs_dir / study.name / "model" / Path(payload.get("model", "model.py")).name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(source)
        payload["model"] = str(path)


class CampaignService:
    def __init__(self, store: CampaignStore, runs_dir: Path, api_url: str, poll_s: float = 10.0,
                 executor_options: dict[str, Any] | None = None) -> None:
        self.store, self.runs_dir, self.api_url, self.poll_s = store, runs_dir, api_url, poll_s
        self.executor_options = executor_options or {}
        self._executors: dict[int, Any] = {}  # study id -> its campaign's executor
        self._campaigns: dict[int, Campaign] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _campaign(self, study: Study) -> Campaign:
        if study.id not in self._campaigns:

            materialise_model(study, self.runs_dir)
            loaded = loaded_from_study(study)
            data = data_manager_for(loaded.spec)
            name = loaded.spec.backend.executor
            self._executors[study.id] = executors.create(
                name, data=data, journal=self.runs_dir / ".journal" / name,
                **self.executor_options.get(name, {}))
            self._campaigns[study.id] = Campaign(loaded, self.store, self._executors[study.id],
                                                 data, self.runs_dir, api_url=self.api_url)
        return self._campaigns[study.id]

    def run_once(self) -> int:
        """One step of every grid campaign; returns how many are still running."""
        running = 0
        for study in self.store.list_studies():
            # (closed: its external optimizer is done; the campaign still runs what is queued)
            if study.state not in ("running", "closed") \
                    or study.spec.get("backend", {}).get("executor", "local") == "local":
                continue
            try:
                if self._campaign(study).step():
                    self.store.set_study_state(study.id, "finished")
                    self._campaigns.pop(study.id, None)
                else:
                    running += 1
            except GridmlError as exc:  # one broken campaign must not stop the others
                log.error("study %s: %s", study.name, exc)
                running += 1
        return running

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
        for ex in self._executors.values():
            ex.close()
