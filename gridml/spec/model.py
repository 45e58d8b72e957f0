"""The training spec's typed models: they live in :mod:`gridml.specmodel.model` (below the store
and the searchers, so a stored study's spec is read typed); re-exported here for the callers."""

from __future__ import annotations

from gridml.specmodel.model import (
    NAME_RE,
    Backend,
    Data,
    Dimension,
    Objective,
    Output,
    Panda,
    Payload,
    Resources,
    Search,
    Slurm,
    Spec,
    StoredSpec,
    Training,
    parse_walltime,
    stored_search,
    stored_spec,
)

__all__ = ["NAME_RE", "Backend", "Data", "Dimension", "Objective", "Output", "Panda", "Payload",
           "Resources", "Search", "Slurm", "Spec", "StoredSpec", "Training", "parse_walltime",
           "stored_search", "stored_spec"]
