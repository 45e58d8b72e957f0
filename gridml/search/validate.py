"""The one validator of search spaces and points: :mod:`gridml.specmodel.space`, re-exported here
for the searchers (it lives below the store so that the spec models can apply it)."""

from __future__ import annotations

from gridml.specmodel.space import (
    KNOWN_KEYS,
    TYPES,
    Problem,
    active,
    clean,
    condition_problems,
    dimension_problems,
    first_point_problem,
    order,
    point_problems,
    same_choice,
    space_problems,
    value_problem,
)

__all__ = ["KNOWN_KEYS", "TYPES", "Problem", "active", "clean", "condition_problems",
           "dimension_problems", "first_point_problem", "order", "point_problems", "same_choice",
           "space_problems", "value_problem"]
