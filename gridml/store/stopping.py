"""Stop requests (`gridml stop`): recorded in the store, acted on by the campaign's controller.

`gridml stop STUDY [--trial N] [--now]` (locally on the study's store, or over the API:
``POST /api/v1/studies/{study}/stop``) calls :func:`request_stop`. It writes nothing but trial
and study states, so whichever controller drives the campaign (a `gridml submit` in another
terminal, the server's controller loop) sees the request at its next cycle:

- each submitted or running trial asked to stop becomes ``stopping``, its ``error`` saying how
  (:data:`GRACEFUL` or :data:`NOW`); a queued one (never started) becomes ``stopped`` at once;
- without ``--trial``, the study becomes ``stopping``: it takes no new trials, and once its last
  trial has ended the controller sets it ``stopped`` (`gridml resume` carries it on).

The controller then stops the trial through the same path as early stopping (gridml/live.py's
``decision.json`` in the trial's folder, the API's should-stop for payloads with an API): the
payload ends its epoch, saves its model and ends; the controller records it ``stopped``. With
``--now`` it cancels the job with the executor's kill (scancel, PanDA's kill, the process group).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from gridml.errors import ConflictError
from gridml.store.protocol import MetricsStore
from gridml.store.records import Study, Trial

GRACEFUL = "stop requested (gridml stop): it ends after its current epoch"
NOW = "stop requested (gridml stop --now): its job is cancelled"
STOPPED_QUEUED = "stopped (gridml stop) before it started"
STOPPED = "stopped (gridml stop)"  # the prefix of a stopped trial's error

__all__ = ["GRACEFUL", "NOW", "STOPPED", "request_stop", "stop_now", "stop_trial"]


def stop_now(trial: Trial) -> bool:
    """The stop asked of a ``stopping`` trial cancels its job (``--now``)."""
    return trial.state == "stopping" and (trial.error or "") == NOW


def stop_trial(store: MetricsStore, trial: Trial, now: bool = False) -> Trial:
    """Ask one active trial to stop (see the module docstring); a finished one is left as is."""
    if trial.state == "queued":
        return store.update_trial(trial.id, state="stopped", error=STOPPED_QUEUED,
                                  finished=datetime.now(UTC))
    if trial.state in ("submitted", "running") or (trial.state == "stopping" and now):
        return store.update_trial(trial.id, state="stopping", error=NOW if now else GRACEFUL)
    return trial


def request_stop(store: MetricsStore, ref: str | int, number: int | None = None,
                 now: bool = False) -> dict[str, Any]:
    """Record `gridml stop`: the study ``ref`` (its trial ``number`` only, when given). Returns
    ``{"study", "state", "now", "trials": [{"number", "state"}]}`` (the trials asked)."""
    study: Study = store.get_study(ref)
    if number is not None:
        trial = store.get_trial_by_number(study.id, number)
        if trial.state not in ("queued", "submitted", "running", "stopping"):
            raise ConflictError(f"study {study.name}: trial {number} is {trial.state}: nothing to "
                             "stop", hint=f"`gridml status {study.name}` lists the running trials")
        trials = [stop_trial(store, trial, now)]
    else:
        if study.state in ("finished", "failed", "stopped"):
            raise ConflictError(f"study {study.name} is {study.state}: nothing to stop",
                             hint=f"`gridml status {study.name}` shows its trials")
        store.set_study_state(study.id, "stopping")
        trials = [stop_trial(store, t, now) for t in
                  store.list_trials(study.id, states=("queued", "submitted", "running", "stopping"))]
        study = store.get_study(study.id)
    return {"study": study.name, "state": study.state, "now": now,
            "trials": [{"number": t.number, "state": t.state} for t in trials]}
