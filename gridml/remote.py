"""Reading a study from a remote `gridml serve` with the same code as from the local store.

``RemoteStore`` offers the read half of the MetricsStore seam over HTTP (``gridml.client``), so
`gridml status/best/fetch --server URL` print exactly what they print locally.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from gridml.client import ApiClient
from gridml.store import EpochReport, Study, Trial

_TRIAL_FIELDS = ("id", "study_id", "number", "hparams", "state", "objective", "epochs_done", "error",
                 "source", "external_id", "attempts", "outputs")
_TIMES = ("last_heartbeat", "created", "started", "finished")


def _time(value: Any) -> datetime | None:
    return datetime.fromisoformat(value) if isinstance(value, str) else value


def trial_from_json(d: dict[str, Any]) -> Trial:
    fields = {k: d[k] for k in _TRIAL_FIELDS if k in d}
    fields.update({k: _time(d.get(k)) for k in _TIMES})
    return Trial(**fields)


class RemoteStore:
    """get_study / list_studies / list_trials / list_epochs of a remote server."""

    def __init__(self, url: str, token: str | None = None, client: ApiClient | None = None) -> None:
        self.client = client or ApiClient(url, token)

    def _study(self, d: dict[str, Any]) -> Study:
        return Study(id=d["id"], name=d["name"], spec=d.get("spec") or {}, spec_hash=d.get("spec_hash", ""),
                     state=d.get("state", "running"), created=_time(d.get("created")))

    def get_study(self, ref: str | int) -> Study:
        return self._study(self.client.get_study(ref))

    def list_studies(self) -> list[Study]:
        return [self._study(d) for d in self.client.list_studies()]

    def list_trials(self, study_id: int, states: tuple[str, ...] | None = None) -> list[Trial]:
        rows = self.client.list_trials(study_id, list(states) if states else None)
        return sorted((trial_from_json(r) for r in rows), key=lambda t: t.number)

    def list_epochs(self, trial_id: int) -> list[EpochReport]:
        return self.client.list_epochs(trial_id)
