"""/api/v1/studies: create, list, summary, trials (list, enqueue), ask, all epochs."""

from __future__ import annotations

import hashlib
import hmac
import json
from typing import Annotated

from fastapi import APIRouter, HTTPException, Path, Query, Request, Response

from gridml.server import metrics, searching
from gridml.server.app_json import SafeJSON
from gridml.server.deps import Principal, Store, Who, can_read_study, can_write_study
from gridml.server.schemas import (
    AskOut,
    EpochOut,
    StudyCreate,
    StudyCreated,
    StudyOut,
    StudySummary,
    TrialEnqueue,
    TrialOut,
    TrialPage,
)
from gridml.store import TRIAL_STATES, Study

router = APIRouter(prefix="/api/v1/studies", tags=["studies"])
StudyRef = Annotated[str, Path(min_length=1, max_length=200, pattern=r"^[A-Za-z0-9._-]+$",
                                 description="study id or name")]


def _study(store: Store, ref: str, who: Principal, write: bool = False) -> Study:
    study = store.get_study(ref)
    (can_write_study if write else can_read_study)(who, study)
    return study


@router.post("", status_code=201, response_model=StudyCreated)
def create_study(body: StudyCreate, store: Store, request: Request) -> StudyCreated:
    """Create a study from a (resolved) spec; the study token is in the reply, once.
    A server started with a creation token (`gridml serve --create-token`) requires it."""
    _check_create_token(request)
    spec_hash = body.spec_hash or hashlib.sha256(
        json.dumps(body.spec, sort_keys=True).encode()).hexdigest()
    study = store.create_study(body.name, body.spec, spec_hash)
    return StudyCreated(**StudyOut.of(study).model_dump(), token=study.token or "")


def _check_create_token(request: Request) -> None:
    expected = request.app.state.create_token
    if not expected:
        return
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(token.strip(), expected):
        raise HTTPException(401, "this server creates studies only with its creation token: "
                                 "pass it with `gridml --token TOKEN submit ...`")


@router.get("", response_model=list[StudyOut])
def list_studies(store: Store, who: Who) -> list[StudyOut]:
    """All studies (anonymous reader), or the one study a token opens."""
    return [StudyOut.of(s) for s in store.list_studies()
            if who.study_id is None or s.id == who.study_id]


@router.get("/{study}", response_model=StudySummary)
def get_study(study: StudyRef, store: Store, who: Who) -> StudySummary:
    """Summary: trial counts by state and the best completed trial."""
    found = _study(store, study, who)
    counts = {state: 0 for state in TRIAL_STATES}
    counts.update(store.count_trials(found.id))
    best = store.best_trial(found)
    return StudySummary(**StudyOut.of(found).model_dump(), counts=counts,
                        best=TrialOut.of(best) if best else None)


@router.get("/{study}/trials", response_model=TrialPage)
def list_trials(study: StudyRef, store: Store, who: Who,
                state: Annotated[list[str] | None, Query()] = None,
                limit: Annotated[int, Query(ge=1, le=1000)] = 100,
                offset: Annotated[int, Query(ge=0, le=2**31)] = 0) -> TrialPage:
    """Trials in number order; ``state`` (repeatable or comma-separated) filters."""
    found = _study(store, study, who)
    states = tuple(s for item in state or [] for s in item.split(",") if s) or None
    bad = [s for s in states or () if s not in TRIAL_STATES]
    if bad:
        raise HTTPException(422, f"unknown state(s) {bad}: use {list(TRIAL_STATES)}")
    trials = store.list_trials(found.id, states, limit=limit, offset=offset)
    total = sum(n for s, n in store.count_trials(found.id).items() if not states or s in states)
    return TrialPage(trials=[TrialOut.of(t) for t in trials], total=total, limit=limit,
                     offset=offset)


@router.post("/{study}/trials", status_code=201, response_model=TrialOut)
def enqueue_trial(study: StudyRef, body: TrialEnqueue, store: Store, who: Who) -> TrialOut:
    """An external optimizer's point: validated against the space, queued for the controller."""
    found = _study(store, study, who, write=True)
    searching.validate_hparams(found, body.hparams)
    trial = store.create_trial(found.id, body.hparams, source="external", state="queued")
    metrics.TRIALS_ENQUEUED.inc()
    return TrialOut.of(trial)


@router.post("/{study}/ask", response_model=AskOut)
def ask(study: StudyRef, store: Store, who: Who,
        n: Annotated[int, Query(ge=1, le=256)] = 1) -> AskOut:
    """``n`` points proposed by the study's own searcher (nothing is enqueued)."""
    found = _study(store, study, who, write=True)
    points, exhausted = searching.ask(store, found, n)
    return AskOut(points=points, exhausted=exhausted)


@router.get("/{study}/epochs", response_model=dict[str, list[EpochOut]])
def study_epochs(study: StudyRef, store: Store, who: Who,
                 limit: Annotated[int | None, Query(ge=1, le=100_000)] = None,
                 offset: Annotated[int, Query(ge=0, le=2**31)] = 0) -> Response:
    """Every stored epoch of every trial, keyed by trial id (dashboard, external analysis);
    ``limit``/``offset``: only the trials of that page of ``/trials`` (in number order)."""
    found = _study(store, study, who)
    epochs = store.study_epochs(found.id, limit=limit, offset=offset, as_json=True)
    # the stored bodies as they are, not through EpochReport and the response model: a
    # 1,000-trial page holds 20,000 reports, and those steps cost more than the query
    return SafeJSON({str(tid): reports for tid, reports in epochs.items()})
