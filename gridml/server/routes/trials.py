"""/api/v1/trials/{trial}: one trial, its epochs, heartbeat, finish, should-stop."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Request, Response
from starlette.concurrency import run_in_threadpool

from gridml.errors import ConflictError
from gridml.server import metrics, searching
from gridml.store.sql.convert import utcnow
from gridml.server.deps import Principal, Store, Who, can_read_trial, can_write_trial
from gridml.server.errors import documented
from gridml.server.links import REPORTED
from gridml.server.schemas import (
    EpochAck,
    EpochIn,
    EpochOut,
    FinishIn,
    Heartbeat,
    ShouldStop,
    TrialOut,
)
from gridml.store import FINISHED_STATES, Trial
from gridml.store.best import scores_of
from gridml.store.spec import search_of

router = APIRouter(prefix="/api/v1/trials", tags=["trials"])
TrialId = Annotated[int, Path(ge=1, le=2**31 - 1,
                                description="trial id (unique over all studies)")]


def _writable(store: Store, trial: int, who: Principal) -> None:
    """Check write access, fetching the trial only when the token is not its own trial token."""
    if who.trial_id == trial:
        return
    can_write_trial(who, trial, store.get_trial(trial).study_id)


async def _writable_async(store: Store, trial: int, who: Principal) -> None:
    if who.trial_id != trial:
        await run_in_threadpool(_writable, store, trial, who)


@router.get("/{trial}", response_model=TrialOut, responses=documented(400, 401, 403, 404, 422))
def get_trial(trial: TrialId, store: Store, who: Who) -> TrialOut:
    found = store.get_trial(trial)
    can_read_trial(who, found)
    return TrialOut.of(found)


@router.post("/{trial}/epochs", status_code=201, response_model=EpochAck, responses={
    200: {"model": EpochAck, "description": "the same report was stored before (a no-op)",
          "links": REPORTED},
    201: {"links": REPORTED},
    **documented(400, 401, 403, 404, 409, 422,
                 e409="a different report is stored for this epoch (reports are write-once)")})
async def post_epoch(trial: TrialId, body: EpochIn, store: Store, who: Who, request: Request,
                     response: Response) -> EpochAck:
    """One epoch's report; a repeat of the same body is a no-op (200), another body is 409.
    Answered after the report is committed (group commit with concurrent reports)."""
    await _writable_async(store, trial, who)
    stored = await request.app.state.batcher.record(trial, body.report())
    response.status_code = 201 if stored else 200
    (metrics.REPORTS if stored else metrics.REPEATS).inc()
    return EpochAck(trial_id=trial, epoch=body.epoch, stored=stored)


@router.get("/{trial}/epochs", response_model=list[EpochOut],
            responses=documented(400, 401, 403, 404, 422))
def list_epochs(trial: TrialId, store: Store, who: Who) -> list[EpochOut]:
    can_read_trial(who, store.get_trial(trial))
    return [EpochOut(**r.to_json()) for r in store.list_epochs(trial)]


@router.post("/{trial}/heartbeat", response_model=Heartbeat,
             responses=documented(400, 401, 403, 404, 422))
def heartbeat(trial: TrialId, store: Store, who: Who) -> Heartbeat:
    _writable(store, trial, who)
    store.heartbeat(trial)
    found = store.get_trial(trial)
    return Heartbeat(trial_id=trial, last_heartbeat=found.last_heartbeat, state=found.state)


@router.post("/{trial}/finish", response_model=TrialOut,
             responses=documented(400, 401, 403, 404, 409, 422,
                                  e409="the trial already finished in another state"))
def finish(trial: TrialId, body: FinishIn, store: Store, who: Who) -> TrialOut:
    """Mark the trial finished; the objective defaults to the last epoch's objective metric."""
    _writable(store, trial, who)
    found = store.get_trial(trial)
    if found.state in FINISHED_STATES:
        return TrialOut.of(_repeat_finish(found, body))
    study = store.get_study(found.study_id)
    scores = scores_of(store.list_epochs(trial), search_of(study))
    objective = scores.pop("objective") if body.objective is None else body.objective
    scores.pop("objective", None)
    return TrialOut.of(store.update_trial(trial, state=body.state, objective=objective,
                                          error=body.error, finished=utcnow(), **scores))


def _repeat_finish(found: Trial, body: FinishIn) -> Trial:
    if found.state != body.state:
        raise ConflictError(f"trial {found.id} already finished as '{found.state}'",
                            hint="a finished trial cannot change state")
    return found


@router.get("/{trial}/should-stop", response_model=ShouldStop,
            responses=documented(400, 401, 403, 404, 422))
def should_stop(trial: TrialId, store: Store, who: Who) -> ShouldStop:
    """The study's early-stopping decision for this trial, from the stored curves; stop for a
    trial that `gridml stop` asked to stop (state ``stopping``)."""
    found = store.get_trial(trial)
    can_read_trial(who, found)
    if found.state == "stopping":  # gridml/store/stopping.py
        return ShouldStop(stop=True, reason=found.error or "stopped (gridml stop)")
    stop, reason = searching.should_stop(store, store.get_study(found.study_id), trial)
    return ShouldStop(stop=stop, reason=reason)
