"""POST /api/v1/studies/{study}/stop: `gridml --server URL stop STUDY [--trial N] [--now]`.

Records the stop request in the store (:func:`gridml.store.stopping.request_stop`); the
server's controller loop (gridml/service.py) acts on it at its next cycle, as a `gridml submit`
does locally. Needs the study's token, like every other write to a study.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from fastapi import APIRouter

from gridml.server.deps import Store, Who, can_write_study
from gridml.server.errors import documented
from gridml.server.routes.studies import StudyRef
from gridml.store.stopping import request_stop

router = APIRouter(prefix="/api/v1/studies", tags=["studies"])


class StopIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    trial: int | None = Field(default=None, ge=0, le=2**31 - 1,
                              description="the trial's number in the study (none: the study)")
    now: bool = Field(default=False, description="cancel the jobs now (scancel, PanDA's kill) "
                      "instead of letting each trial end its current epoch")


class StoppedTrial(BaseModel):
    number: int
    state: str


class StopOut(BaseModel):
    study: str
    state: str = Field(description="the study's state (stopping: its trials end, no new ones)")
    now: bool
    trials: list[StoppedTrial] = Field(description="the trials asked to stop, with their state "
                                       "(stopping; stopped for a queued one)")


@router.post("/{study}/stop", response_model=StopOut,
             responses=documented(400, 401, 403, 404, 409, 422,
                                  e409="the study or trial has already ended: nothing to stop"))
def stop_study(study: StudyRef, store: Store, who: Who, body: StopIn | None = None) -> StopOut:
    """Stop the study's running trials (or only trial ``trial``): gracefully by default (each
    ends its current epoch, saves its model and ends ``stopped``; the study takes no new trials),
    or ``now`` (their jobs are cancelled). The server's controller acts at its next cycle."""
    body = body or StopIn()
    found = store.get_study(study)
    can_write_study(who, found)
    return StopOut.model_validate(request_stop(store, found.id, body.trial, body.now))
