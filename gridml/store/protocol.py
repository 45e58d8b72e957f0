"""What a metrics store offers: reading, writing, and (on a side protocol) tokens.

``StoreReader`` is what `gridml status/best/fetch` need and what every backend has (the remote
one too); ``MetricsStore`` adds the writes the controller and the API make; ``TokenStore`` is
the bearer-token half only the SQL store (behind the API and the controller) has.
"""

from __future__ import annotations

from typing import Any, Protocol

from gridml.store.records import EpochReport, Study, Trial


class StoreReader(Protocol):
    def get_study(self, ref: str | int) -> Study: ...  # by name or id; NotFoundError
    def list_studies(self) -> list[Study]: ...
    def get_trial(self, trial_id: int) -> Trial: ...
    def get_trial_by_number(self, study_id: int, number: int) -> Trial: ...
    def list_trials(self, study_id: int, states: tuple[str, ...] | None = None) -> list[Trial]: ...
    def list_epochs(self, trial_id: int) -> list[EpochReport]: ...
    def best_trial(self, study: Study) -> Trial | None: ...  # the rule of gridml.store.best
    def close(self) -> None: ...


class MetricsStore(StoreReader, Protocol):
    def create_study(self, name: str, spec: dict[str, Any], spec_hash: str) -> Study: ...
    def set_study_state(self, study_id: int, state: str) -> None: ...
    # the same campaign submitted again with other budget/backend fields (max_trials raised):
    # the stored spec becomes ``spec``; its hash must be the study's (ConflictError otherwise)
    def update_study_spec(self, study_id: int, spec: dict[str, Any], spec_hash: str) -> Study: ...
    def create_trial(self, study_id: int, hparams: dict[str, Any], *, source: str = "searcher",
                     state: str = "queued") -> Trial: ...  # numbers 0,1,2...; returns its token
    def update_trial(self, trial_id: int, **fields: Any) -> Trial: ...
    # state, objective, error, external_id, attempts, started, finished, outputs
    def heartbeat(self, trial_id: int) -> None: ...
    # per-epoch metrics: idempotent on (trial, epoch); same body -> False (no-op),
    # different body -> ConflictError, new -> True
    def record_epoch(self, trial_id: int, report: EpochReport) -> bool: ...


class TokenStore(Protocol):
    """Study and trial bearer tokens (stored as sha256 only)."""

    def check_study_token(self, study_id: int, token: str) -> bool: ...
    def issue_study_token(self, study_id: int) -> str: ...  # one more (the others stay valid)
    def issue_trial_token(self, trial_id: int) -> str: ...  # new token (old one revoked)
    def check_trial_token(self, trial_id: int, token: str) -> bool: ...
    def resolve_token(self, token: str) -> tuple[int, int | None] | None: ...  # (study, trial)


class CampaignStore(MetricsStore, TokenStore, Protocol):
    """What the controller drives a campaign with: the SQL store."""
