"""The metrics store: studies, trials, per-epoch metrics, heartbeats, outputs.

    from gridml.store import open_store, Study, Trial, EpochReport, best_trial
    store = open_store("sqlite:///g.db")          # or postgresql://..., or http(s)://server

- records and states: ``gridml.store.records``; protocols: ``gridml.store.protocol``
  (``StoreReader`` < ``MetricsStore``; tokens on the side: ``TokenStore``)
- the one objective / best-trial rule: ``gridml.store.best``
- a study's spec, typed: ``spec_of(study)`` (``gridml.store.spec``; the models: ``gridml.specmodel``)
- backends: ``gridml.store.sql`` (SQLAlchemy on SQLite or PostgreSQL, Alembic migrations) and
  ``gridml.store.remote`` (read-only, a `gridml serve` over HTTP); ``open_store`` chooses.

Database and driver errors leave a store as ``StoreUnavailableError`` (one line, with a fix).
"""

from gridml.store.best import best_trial, direction_of, objective_of, pick_best, usable
from gridml.store.factory import open_store
from gridml.store.protocol import CampaignStore, MetricsStore, StoreReader, TokenStore
from gridml.store.records import (
    ACTIVE_STATES,
    FINISHED_STATES,
    STUDY_STATES,
    TRIAL_STATES,
    EpochReport,
    Study,
    Trial,
)
from gridml.store.spec import spec_of

__all__ = [
    "ACTIVE_STATES", "FINISHED_STATES", "STUDY_STATES", "TRIAL_STATES", "CampaignStore", "EpochReport",
    "MetricsStore", "StoreReader", "Study", "TokenStore", "Trial", "best_trial", "direction_of",
    "objective_of", "open_store", "pick_best", "spec_of", "usable",
]
