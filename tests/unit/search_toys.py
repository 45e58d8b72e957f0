"""The toy search space, objective and campaign loop that the searcher tests share."""

from __future__ import annotations

import math

from gridml import search

SPACE = {
    "lr": {"type": "real", "low": 1e-4, "high": 1e-1, "log": True},
    "units": {"type": "int", "low": 8.0, "high": 128.0},
    "dropout": {"type": "real", "low": 0.0, "high": 0.5, "log": False},
    "activation": {"type": "categorical", "choices": ["relu", "elu", "tanh"]},
}
CONDITIONAL = {
    "optimizer": {"type": "categorical", "choices": ["sgd", "adam"]},
    "momentum": {"type": "real", "low": 0.0, "high": 0.99, "conditional": {"optimizer": "sgd"}},
    "lr": {"type": "real", "low": 1e-4, "high": 1e-1, "log": True},
    "layers": {"type": "int", "low": 1, "high": 64, "log": True},
}
FAST = {"bayes": {"n_initial_points": 4, "candidates": 200, "restarts": 0},
        "skopt": {"n_initial_points": 4, "acq_optimizer_kwargs": {"n_points": 500}},
        "optuna": {"n_startup_trials": 4},
        "grid": {"grid_points": 2}}


def make(algo: str, space: dict = SPACE, **kw):
    return search.create(algo, space, **{**FAST.get(algo, {}), **kw})


def objective(p: dict) -> float:
    """A smooth toy loss with its optimum inside the space."""
    cat = {"relu": 0.0, "elu": 0.1, "tanh": 0.3}.get(p.get("activation"), 0.0)
    return ((math.log10(p["lr"]) + 2.5) ** 2 + (p.get("units", 40) - 40) ** 2 / 2000
            + (p.get("dropout", 0.2) - 0.2) ** 2 + cat)


def run(algo: str, rounds: int, batch: int, space: dict = SPACE, fail_every: int = 0, **kw):
    """A campaign the way the controller runs it: the searcher rebuilt every cycle."""
    told, values = [], []
    for _ in range(rounds):
        s = make(algo, space, **kw)
        s.tell(told, values)
        points = s.ask(batch)
        told += points
        values += [None if fail_every and (len(values) + i) % fail_every == 0 else objective(p)
                   for i, p in enumerate(points)]
    return told, values
