"""/api/v1/studies: create, list, summary, trials (list, enqueue), ask, close, all epochs."""

from __future__ import annotations

import hashlib
import hmac
import json
from typing import Annotated

from fastapi import APIRouter, Path, Query, Request, Response

from gridml.server import metrics, searching
from gridml.server.app_json import SafeJSON
from gridml.errors import ConflictError
from gridml.server.deps import Principal, Store, Who, can_read_study, can_write_study
from gridml.server.admin import is_loopback
from gridml.server.errors import ApiError, documented
from gridml.server.links import ASKED, FIRST_TRIAL, STUDY, TRIAL, links
from gridml.server.specs import check_spec
from gridml.server.schemas import (
    AskOut,
    EpochOut,
    StateFilter,
    StudyCreate,
    StudyCreated,
    StudyOut,
    StudySummary,
    TrialEnqueue,
    TrialOut,
    TrialPage,
)
from gridml.store import TRIAL_STATES, Study
from gridml.store.best import pareto_front
from gridml.store.spec import search_of
from gridml.store.sql import SqlStore

router = APIRouter(prefix="/api/v1/studies", tags=["studies"])
StudyRef = Annotated[str, Path(min_length=1, max_length=200, pattern=r"^[A-Za-z0-9._-]+$",
                                 description="study id or name")]


def _study(store: Store, ref: str, who: Principal, write: bool = False) -> Study:
    study = store.get_study(ref)
    (can_write_study if write else can_read_study)(who, study)
    return study


@router.post("", status_code=201, response_model=StudyCreated,
             responses=documented(400, 401, 403, 409, 422, e401=(
                 "no admin token, or a wrong one: this server creates studies only with its "
                 "admin token (printed by `gridml serve`, kept in its 0600 token file)"),
                 e403="this server takes no new studies (it has no admin token)",
                 e409="a study with this name exists", e422=(
                 "the body does not validate, or the spec does not (checked as `gridml "
                 "validate` checks one; `detail` names each field)")) | links(s201=STUDY))
def create_study(body: StudyCreate, store: Store, request: Request) -> StudyCreated:
    """Create a study from a (resolved) spec; the study token is in the reply, once.
    Needs the server's admin token as bearer token (`gridml serve` prints it); a server on
    loopback started with `--allow-anonymous-studies` (or the embedded server of `gridml
    submit`) also takes none from this machine. The spec is checked as `gridml validate` checks
    one (a partial spec, e.g. only `search`, is checked section by section): 422 names each
    problem's field."""
    _check_create_token(request)
    check_spec(body.spec)
    spec_hash = body.spec_hash or hashlib.sha256(
        json.dumps(body.spec, sort_keys=True).encode()).hexdigest()
    study = store.create_study(body.name, body.spec, spec_hash)
    return StudyCreated(**StudyOut.of(study).model_dump(), token=study.token or "")


def _check_create_token(request: Request) -> None:
    """The admin token, or (anonymous creation allowed) a client on loopback."""
    state = request.app.state
    expected: str | None = state.create_token
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    given = token.strip() if scheme.lower() == "bearer" else ""
    if expected and given and hmac.compare_digest(given.encode(), expected.encode()):
        return
    if state.anonymous_studies and is_loopback(request.client.host if request.client else None):
        return
    if not expected:
        raise ApiError(403, "this server takes no new studies: it has no admin token",
                       hint="start it with `gridml serve` (which makes one), or on loopback "
                            "with --allow-anonymous-studies")
    raise ApiError(401, "this server creates studies only with its admin token (the creation "
                   "token)" + ("; that token is not it" if given else ""),
                   hint="`gridml serve` printed it and keeps it in its token file "
                        "($GRIDML_HOME/admin-token); send it with `gridml --token TOKEN submit "
                        "...` or GRIDML_ADMIN_TOKEN=TOKEN")


@router.get("", response_model=list[StudyOut], responses=documented(400, 401))
def list_studies(store: Store, who: Who) -> list[StudyOut]:
    """All studies (anonymous reader), or the one study a token opens."""
    return [StudyOut.of(s) for s in store.list_studies()
            if who.study_id is None or s.id == who.study_id]


@router.get("/{study}", response_model=StudySummary,
            responses=documented(400, 401, 403, 404, 422))
def get_study(study: StudyRef, store: Store, who: Who) -> StudySummary:
    """Summary: trial counts by state, the best completed trial and the Pareto front (the
    numbers of its trials: several objectives, gridml.store.best)."""
    found = _study(store, study, who)
    counts = {state: 0 for state in TRIAL_STATES}
    counts.update(store.count_trials(found.id))
    best = store.best_trial(found)
    front = pareto_front(found, store.list_trials(found.id, ("completed",)))
    return StudySummary(**StudyOut.of(found).model_dump(), counts=counts,
                        best=TrialOut.of(best) if best else None,
                        pareto=[t.number for t in front])


@router.get("/{study}/importance", response_model=dict[str, float],
            responses=documented(400, 401, 403, 404, 422))
def study_importance(study: StudyRef, store: Store, who: Who) -> dict[str, float]:
    """{parameter: share} of the (first) objective's variance over the finished trials
    (fANOVA, gridml.search.importance); {} with too few trials."""
    from gridml.search.importance import importance  # lazy: imports Optuna

    found = _study(store, study, who)
    search = search_of(found)
    if not search.space:
        return {}
    return importance(search, store.list_trials(found.id))


@router.get("/{study}/trials", response_model=TrialPage,
            responses=documented(400, 401, 403, 404, 422) | links(s200=FIRST_TRIAL))
def list_trials(study: StudyRef, store: Store, who: Who,
                state: Annotated[list[StateFilter] | None, Query(
                    description="trial states, repeated or comma-separated")] = None,
                limit: Annotated[int, Query(ge=1, le=1000)] = 100,
                offset: Annotated[int, Query(ge=0, le=2**31)] = 0) -> TrialPage:
    """Trials in number order; ``state`` (repeatable or comma-separated) filters."""
    found = _study(store, study, who)
    states = tuple(s for item in state or [] for s in item.split(",") if s) or None
    trials = store.list_trials(found.id, states, limit=limit, offset=offset)
    total = sum(n for s, n in store.count_trials(found.id).items() if not states or s in states)
    return TrialPage(trials=[TrialOut.of(t) for t in trials], total=total, limit=limit,
                     offset=offset)


@router.post("/{study}/trials", status_code=201, response_model=TrialOut,
             responses=documented(400, 401, 403, 404, 409, 422, e409=(
                 "the study is closed or finished, its `max_trials` budget is spent (search."
                 "algorithm external), or its spec has no search section"), e422=(
                 "the body does not validate, or the point is outside the study's "
                 "search.space (`detail` names each problem)")) | links(s201=TRIAL))
def enqueue_trial(study: StudyRef, body: TrialEnqueue, store: Store, who: Who) -> TrialOut:
    """An external optimizer's point: validated against the space, queued for the controller,
    which runs queued trials in the order they were enqueued."""
    found = _study(store, study, who, write=True)
    _check_open(store, found)
    searching.validate_hparams(found, body.hparams)
    trial = store.create_trial(found.id, body.hparams, source="external", state="queued")
    metrics.TRIALS_ENQUEUED.inc()
    return TrialOut.of(trial)


@router.post("/{study}/ask", response_model=AskOut,
             responses=documented(400, 401, 403, 404, 409, 422,
                                  e409="the study's spec has no search.space to search")
             | links(s200=ASKED))
def ask(study: StudyRef, store: Store, who: Who,
        n: Annotated[int, Query(ge=1, le=256)] = 1) -> AskOut:
    """``n`` points proposed by the study's own searcher (nothing is enqueued)."""
    found = _study(store, study, who, write=True)
    points, exhausted = searching.ask(store, found, n)
    return AskOut(points=points, exhausted=exhausted)


@router.get("/{study}/epochs", response_model=dict[str, list[EpochOut]],
            responses=documented(400, 401, 403, 404, 422))
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


@router.post("/{study}/close", response_model=StudyOut,
             responses=documented(400, 401, 403, 404, 422))
def close_study(study: StudyRef, store: Store, who: Who) -> StudyOut:
    """No more trials will be enqueued: the campaign runs the trials already queued or running
    and ends (an external optimizer's last call). Closing a closed or finished study is a
    no-op."""
    found = _study(store, study, who, write=True)
    if found.state not in ("closed", "finished"):
        store.set_study_state(found.id, "closed")
        found = store.get_study(found.id)
    return StudyOut.of(found)


def _check_open(store: SqlStore, study: Study) -> None:
    """Enqueueing needs a study that still takes trials (and, for search.algorithm external,
    one whose ``max_trials`` are not all there yet)."""
    if study.state in ("closed", "finished"):
        raise ConflictError(f"study '{study.name}' is {study.state}: it takes no more trials",
                            hint="create a new study (a new spec name) to run more")
    search = search_of(study)
    budget = search.max_trials
    # a study created over the API without max_trials has no budget here
    if search.algorithm == "external" and "max_trials" in search.model_fields_set:
        if sum(store.count_trials(study.id).values()) >= budget:
            raise ConflictError(f"study '{study.name}' has all its {budget} trials (max_trials)",
                                hint="wait for them to finish, then close the study")
