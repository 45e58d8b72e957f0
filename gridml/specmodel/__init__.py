"""The spec's own floor: the typed spec models and the pure validators they apply.

Below the store and the searchers (it imports nothing of gridml), so that a study's spec is read
typed wherever it is read: :func:`stored_spec` (the store's ``spec_of(study)``) for a stored one.
``gridml.spec`` re-exports the models and adds the loader and the checks that need the engines.
"""

from __future__ import annotations

from gridml.specmodel.constraint import Constraint, parse_constraint, usable
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

__all__ = ["NAME_RE", "Backend", "Constraint", "Data", "Dimension", "Objective", "Output", "Panda",
           "Payload", "Resources", "Search", "Slurm", "Spec", "StoredSpec", "Training",
           "parse_constraint", "parse_walltime", "stored_search", "stored_spec", "usable"]
