"""Searchers behind one seam: ``create(algorithm, space, seed=, direction=, **options)``.

    from gridml import search
    s = search.create("bayes", {"lr": {"type": "real", "low": 1e-4, "high": 0.1, "log": True}},
                      seed=1, direction="minimize")
    s.tell([{"lr": 0.01}], [0.42])
    s.ask(4, pending=[...])      # -> list of new points (plain dicts)
    s.exhausted                  # True once no new point is left (grid)

Algorithms: ``bayes`` (gridml's fast default: scikit-optimize's GP model, one kernel fit per
batch), ``skopt`` (scikit-optimize's own ``Optimizer``: GP, RF, ET or GBRT), ``optuna`` (an Optuna
sampler: TPE by default), ``random``, ``grid`` and ``evolution`` (CMA-ES). See docs/search.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from importlib import import_module
from typing import Any

from gridml.errors import SearchError
from gridml.search.base import BaseSearcher, Point, Searcher
from gridml.search.validate import point_problems, space_problems

ALGORITHMS = {
    "bayes": "gridml.search.bayes:BayesSearcher",
    "skopt": "gridml.search.skoptimizer:SkoptSearcher",
    "optuna": "gridml.search.optuna_sampler:OptunaSearcher",
    "random": "gridml.search.random:RandomSearcher",
    "grid": "gridml.search.grid:GridSearcher",
    "evolution": "gridml.search.evolution:EvolutionSearcher",
    "external": "gridml.search.external:ExternalSearcher",  # proposes nothing: points come over the API
}

__all__ = ["ALGORITHMS", "BaseSearcher", "Point", "Searcher", "create", "point_problems",
           "validate_space"]


def create(algorithm: str, space: Mapping[str, Any], *, seed: int = 0,
           direction: str = "minimize", **options: Any) -> BaseSearcher:
    """A searcher for ``space`` (the spec's ``search.space``); options as in docs/search.md.
    ``directions=[...]`` (several objectives) and ``constraints=k`` are refused by the
    algorithms that cannot take them (``SearchError`` naming search.objectives/constraints)."""
    target = ALGORITHMS.get(algorithm)
    if target is None:
        raise SearchError(f"search.algorithm: {algorithm!r} is not known",
                          hint=f"use one of {', '.join(ALGORITHMS)}")
    module, cls = target.split(":")
    return getattr(import_module(module), cls)(space, seed=seed, direction=direction, **options)


def validate_space(space: Mapping[str, Any]) -> list[str]:
    """Problems with a ``search.space`` mapping (empty when it is fine), as
    ``search.space.<name>.<field>: what is wrong; fix``."""
    return [str(p) for p in space_problems(space)]
