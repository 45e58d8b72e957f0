"""The read-only store of a remote `gridml serve`, over its API (``gridml.client``).

``RemoteStore`` offers the ``StoreReader`` half of the store protocol, so that
`gridml --server URL status/best/fetch` print exactly what they print locally. Writes are
refused with a ``StoreError`` naming the server: campaigns write through the API's own routes.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, NoReturn

from gridml.store.client import ApiClient
from gridml.errors import NotFoundError, StoreError
from gridml.store.records import EpochReport, Study, Trial

_TRIAL_FIELDS = ("id", "study_id", "number", "hparams", "state", "objective", "epochs_done", "error",
                 "source", "external_id", "attempts", "outputs", "objectives", "violations",
                 "test_metrics")
_TIMES = ("last_heartbeat", "created", "started", "finished")
PAGE = 1000  # the API's largest page of trials


def _time(value: Any) -> datetime | None:
    return datetime.fromisoformat(value) if isinstance(value, str) else value


def trial_from_json(d: dict[str, Any]) -> Trial:
    fields = {k: d[k] for k in _TRIAL_FIELDS if k in d}
    fields.update({k: _time(d.get(k)) for k in _TIMES})
    return Trial(**fields)


def study_from_json(d: dict[str, Any]) -> Study:
    return Study(id=d["id"], name=d["name"], spec=d.get("spec") or {},
                 spec_hash=d.get("spec_hash", ""), state=d.get("state", "running"),
                 created=_time(d.get("created")))


class RemoteStore:
    """The reads of a remote server's store; every write raises StoreError."""

    def __init__(self, url: str, token: str | None = None, client: ApiClient | None = None) -> None:
        self.url = url.rstrip("/")
        self.client = client or ApiClient(url, token)

    def close(self) -> None:
        self.client.close()

    # -- reads ---------------------------------------------------------------------------------
    def get_study(self, ref: str | int) -> Study:
        return study_from_json(self.client.get_study(ref))

    def list_studies(self) -> list[Study]:
        return [study_from_json(d) for d in self.client.list_studies()]

    def get_trial(self, trial_id: int) -> Trial:
        return trial_from_json(self.client.get_trial(trial_id))

    def get_trial_by_number(self, study_id: int, number: int) -> Trial:
        rows = self.client.list_trials(study_id, limit=1, offset=number)
        if not rows or rows[0]["number"] != number:  # numbers are dense 0, 1, 2 ... but be sure
            rows = [r for r in self._pages(study_id, None) if r["number"] == number]
        if not rows:
            raise NotFoundError(f"trial number {number} of study {study_id} not found on "
                                f"{self.url}", hint="`gridml status STUDY` lists the trials")
        return trial_from_json(rows[0])

    def list_trials(self, study_id: int, states: tuple[str, ...] | None = None) -> list[Trial]:
        return sorted((trial_from_json(r) for r in self._pages(study_id, states)),
                      key=lambda t: t.number)

    def _pages(self, study_id: int, states: tuple[str, ...] | None) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = []
        while True:
            page = self.client.list_trials(study_id, list(states) if states else None,
                                           limit=PAGE, offset=len(rows))
            rows.extend(page)
            if len(page) < PAGE:
                return rows

    def list_epochs(self, trial_id: int) -> list[EpochReport]:
        return self.client.list_epochs(trial_id)

    def best_trial(self, study: Study) -> Trial | None:
        """The server's pick (``gridml.store.best``, applied where the trials are)."""
        best = self.client.get_study(study.id).get("best")
        return None if best is None else trial_from_json(best)

    # -- writes: refused -----------------------------------------------------------------------
    def _read_only(self, what: str) -> NoReturn:
        raise StoreError(f"the store of {self.url} is read-only here: cannot {what}",
                         hint="write through the server's API (gridml.client.ApiClient with a "
                              "study token), or run the command where the database is")

    def create_study(self, name: str, spec: dict[str, Any], spec_hash: str) -> Study:
        self._read_only(f"create study '{name}'")

    def set_study_state(self, study_id: int, state: str) -> None:
        self._read_only(f"set the state of study {study_id}")

    def update_study_spec(self, study_id: int, spec: dict[str, Any], spec_hash: str) -> Study:
        self._read_only(f"update the spec of study {study_id}")

    def create_trial(self, study_id: int, hparams: dict[str, Any], *, source: str = "searcher",
                     state: str = "queued") -> Trial:
        self._read_only(f"create a trial of study {study_id}")

    def update_trial(self, trial_id: int, **fields: Any) -> Trial:
        self._read_only(f"update trial {trial_id}")

    def heartbeat(self, trial_id: int) -> None:
        self._read_only(f"record a heartbeat of trial {trial_id}")

    def record_epoch(self, trial_id: int, report: EpochReport) -> bool:
        self._read_only(f"record epoch {report.epoch} of trial {trial_id}")
