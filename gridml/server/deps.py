"""Shared dependencies of the routers: the store and who the bearer token belongs to.

Rules: a study token may read and write its own study and its trials; a trial token may write
only its own trial (epochs, heartbeat, finish) and read its own study. Any other study or trial:
403. No or unknown token: 401, unless the app was created with ``open_reads`` and the request
only reads.

Known tokens are cached per process for ``TOKEN_TTL`` seconds (the hot path does no token query);
a token revoked by ``issue_trial_token`` may thus still work that long in another process.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Request
from starlette.concurrency import run_in_threadpool

from gridml.server.errors import ApiError
from gridml.store import Study, Trial
from gridml.store.sql import SqlStore


@dataclass(frozen=True)
class Principal:
    study_id: int | None  # None: anonymous reader (open_reads)
    trial_id: int | None = None


TOKEN_TTL = 10.0
_CACHE_MAX = 100_000


async def get_store(request: Request) -> SqlStore:
    return request.app.state.store  # type: ignore[no-any-return]


async def _resolve(request: Request, store: SqlStore, token: str) -> tuple[int, int | None] | None:
    cache: dict[str, tuple[float, tuple[int, int | None]]] = request.app.state.token_cache
    now = time.monotonic()
    hit = cache.get(token)
    if hit is not None and hit[0] > now:
        return hit[1]
    found = await run_in_threadpool(store.resolve_token, token)
    if found is not None:
        if len(cache) >= _CACHE_MAX:
            cache.clear()
        cache[token] = (now + TOKEN_TTL, found)
    return found


async def principal(request: Request, store: Annotated[SqlStore, Depends(get_store)]) -> Principal:
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        if request.method == "GET" and request.app.state.open_reads:
            return Principal(None)
        raise ApiError(401, "missing bearer token",
                       hint="send 'Authorization: Bearer <study or trial token>' (the study "
                            "token is printed by `gridml submit` and kept in runs/<study>/api.json)")
    found = await _resolve(request, store, token.strip())
    if found is None:
        raise ApiError(401, "unknown or revoked token",
                       hint="use the study token of this study, or the trial's current token")
    return Principal(*found)


Who = Annotated[Principal, Depends(principal)]
Store = Annotated[SqlStore, Depends(get_store)]


def can_read_study(who: Principal, study: Study) -> None:
    if who.study_id is not None and who.study_id != study.id:
        raise ApiError(403, f"this token does not open study '{study.name}'",
                       hint="use that study's own token")


def can_write_study(who: Principal, study: Study) -> None:
    if who.study_id != study.id or who.trial_id is not None:
        raise ApiError(403, f"writing study '{study.name}' needs its study token",
                       hint="a trial token may only report for its own trial")


def can_read_trial(who: Principal, trial: Trial) -> None:
    if who.study_id is not None and who.study_id != trial.study_id:
        raise ApiError(403, f"this token does not open trial {trial.id}",
                       hint="use the token of the trial's study")


def can_write_trial(who: Principal, trial_id: int, study_id: int) -> None:
    """Its own trial token, or the study token of the trial's study."""
    if who.trial_id is not None:
        if who.trial_id != trial_id:
            raise ApiError(403, f"a trial token may write only its own trial, not trial {trial_id}",
                           hint="use that trial's token, or the study token")
        return
    if who.study_id != study_id:
        raise ApiError(403, f"this token does not open trial {trial_id}",
                       hint="use the token of the trial's study")
