"""Contract tests of the Searcher seam, run against every algorithm (real skopt/cma, no mocks)."""

from __future__ import annotations

import json
import math

import pytest

from gridml import search
from gridml.errors import SearchError, SpecError

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
ALGOS = ["random", "grid", "bayes", "evolution"]
FAST = {"bayes": {"n_initial_points": 4, "candidates": 200, "restarts": 0}, "grid": {"grid_points": 2}}


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
    for r in range(rounds):
        s = make(algo, space, **kw)
        s.tell(told, values)
        points = s.ask(batch)
        told += points
        values += [None if fail_every and (len(values) + i) % fail_every == 0 else objective(p)
                   for i, p in enumerate(points)]
    return told, values


def check_point(p: dict, space: dict) -> None:
    json.dumps(p)
    for name, dim in space.items():
        if name not in p:
            continue
        v = p[name]
        if dim["type"] == "categorical":
            assert v in dim["choices"]
        elif dim["type"] == "int":
            assert type(v) is int and dim["low"] <= v <= dim["high"]
        else:
            assert type(v) is float and dim["low"] <= v <= dim["high"]


@pytest.mark.parametrize("algo", ALGOS)
def test_points_are_typed_in_bounds_and_serialisable(algo):
    told, _ = run(algo, rounds=3, batch=3)
    assert len(told) == 9
    for p in told:
        assert set(p) == set(SPACE)
        check_point(p, SPACE)


@pytest.mark.parametrize("algo", ALGOS)
def test_same_seed_same_points_other_seed_other_points(algo):
    a, _ = run(algo, rounds=2, batch=3, seed=5)
    b, _ = run(algo, rounds=2, batch=3, seed=5)
    assert a == b
    if algo != "grid":  # the grid's order does not depend on the seed
        c, _ = run(algo, rounds=2, batch=3, seed=6)
        assert a != c


@pytest.mark.parametrize("algo", ALGOS)
def test_never_repeats_told_or_pending_points(algo):
    told, values = run(algo, rounds=3, batch=2)
    s = make(algo)
    s.tell(told[:4], values[:4])
    pending = told[4:]
    new = s.ask(4, pending=pending)
    keys = [s.space.key(p) for p in told + new]
    assert len(new) == 4 and len(set(keys)) == len(keys)


@pytest.mark.parametrize("algo", ["random", "bayes", "evolution"])
def test_rebuilt_searcher_with_more_observations_proposes_new_points(algo):
    told, values = run(algo, rounds=2, batch=3)
    first = make(algo)
    first.tell(told, values)
    before = first.ask(3)
    again = make(algo)
    again.tell(told, values)
    assert again.ask(3) == before  # rebuilt from the same observations: same proposal
    more = make(algo)
    more.tell(told + before[:1], values + [objective(before[0])])
    after = more.ask(3)
    assert not {more.space.key(p) for p in after} & {more.space.key(p) for p in told + before[:1]}
    pend = make(algo)
    pend.tell(told, values)
    with_pending = pend.ask(3, pending=before)
    assert not {pend.space.key(p) for p in with_pending} & {pend.space.key(p) for p in before}


@pytest.mark.parametrize("algo", ALGOS)
def test_failed_trials_are_skipped(algo):
    told, values = run(algo, rounds=3, batch=3, fail_every=2)
    assert any(v is None for v in values)
    s = make(algo)
    s.tell(told, [float("nan") if v is None else v for v in values])
    for p in s.ask(3):
        check_point(p, SPACE)


@pytest.mark.parametrize("algo", ["bayes", "evolution"])
def test_maximize_is_minimize_of_the_negative(algo):
    told, values = run(algo, rounds=3, batch=3)
    lo = make(algo, direction="minimize")
    lo.tell(told, values)
    hi = make(algo, direction="maximize")
    hi.tell(told, [-v for v in values])
    assert lo.ask(2) == hi.ask(2)


def test_bayes_improves_on_its_initial_design():
    _, values = run("bayes", rounds=6, batch=3, n_initial_points=6)
    assert min(values[6:]) < min(values[:6])


@pytest.mark.parametrize("algo", ALGOS)
def test_conditional_parameters_exist_only_with_their_parent(algo):
    told, _ = run(algo, rounds=3, batch=4, space=CONDITIONAL)
    assert {p["optimizer"] for p in told} == {"sgd", "adam"}
    for p in told:
        check_point(p, CONDITIONAL)
        assert ("momentum" in p) == (p["optimizer"] == "sgd")


def test_grid_enumerates_the_product_then_is_exhausted():
    space = {"a": {"type": "real", "low": 0.0, "high": 1.0},
             "b": {"type": "categorical", "choices": ["x", "y"]},
             "n": {"type": "int", "low": 1, "high": 2}}
    s = search.create("grid", space, grid_points=3)
    first = s.ask(5)
    assert not s.exhausted and [p["a"] for p in first[:2]] == [0.0, 0.0]
    rest = s.ask(100, pending=first)
    assert len(first) + len(rest) == 3 * 2 * 2 and s.exhausted
    assert {p["a"] for p in first + rest} == {0.0, 0.5, 1.0}
    done = search.create("grid", space, grid_points=3)
    done.tell(first + rest, [1.0] * 12)
    assert done.ask(1) == [] and done.exhausted
    assert done.exhausted_reason == "grid: all 12 points of the space are told or pending"


def test_grid_log_and_conditional_levels():
    s = search.create("grid", CONDITIONAL, grid_points=2)
    points = s.ask(1000)
    assert s.exhausted and len(points) == 2 * 2 * 2 + 2 * 2  # sgd: x momentum; adam: without
    assert sorted({p["lr"] for p in points}) == pytest.approx([1e-4, 1e-1])
    assert {p["layers"] for p in points} == {1, 64}


@pytest.mark.parametrize("algo", ALGOS)
def test_a_small_discrete_space_runs_out(algo):
    space = {"a": {"type": "int", "low": 0, "high": 2}, "b": {"type": "categorical",
                                                          "choices": [True, False]}}
    extra = {"grid_points": 3} if algo == "grid" else {}  # every int of 0..2
    s = make(algo, space, seed=3, **extra)
    points = s.ask(10)
    assert len(points) == 6 and s.exhausted
    assert len({(p["a"], p["b"]) for p in points}) == 6
    again = make(algo, space, seed=3, **extra)
    again.tell(points[:4], [1.0, 2.0, None, 0.5])
    rest = again.ask(3, pending=points[4:5])
    assert rest == [points[5]] or (len(rest) == 1 and rest[0] not in points[:5])
    assert again.exhausted


def test_unknown_algorithm_and_options_are_refused_clearly():
    with pytest.raises(SearchError, match="use one of bayes, random, grid, evolution"):
        search.create("tpe", SPACE)
    with pytest.raises(SearchError, match="grid_points"):
        search.create("random", SPACE, grid_points=3)
    with pytest.raises(SearchError, match="minimize or maximize"):
        search.create("random", SPACE, direction="up")


@pytest.mark.parametrize("space, message", [
    ({"a": {"type": "real", "low": 1.0, "high": 0.0}}, "search.space.a.high: empty or inverted"),
    ({"a": {"type": "real", "low": 0.0, "high": 1.0, "log": True}}, "must be > 0 for a log"),
    ({"a": {"type": "float", "low": 0, "high": 1}}, "search.space.a.type"),
    ({"a": {"type": "categorical", "choices": []}}, "non-empty list of choices"),
    ({"a": {"type": "int", "low": 0.5, "high": 3}}, "whole numbers"),
    ({"a": {"type": "real", "low": 0, "high": 1, "conditional": {"b": 1}}}, "unknown parameter 'b'"),
    ({"a": {"type": "categorical", "choices": ["x"]},
      "b": {"type": "real", "low": 0, "high": 1, "conditional": {"a": "z"}}}, "'z' is not a choice"),
    ({"a": {"type": "categorical", "choices": ["x"], "conditional": {"b": 0.5}},
      "b": {"type": "real", "low": 0, "high": 1, "conditional": {"a": "x"}}}, "cycle"),
    ({}, "non-empty mapping"),
])
def test_bad_spaces_are_refused_with_the_field_and_fix(space, message):
    with pytest.raises(SpecError, match=message):
        search.create("random", space)
    assert search.validate_space(space)


def test_tell_checks_its_arguments():
    s = search.create("random", SPACE)
    with pytest.raises(SearchError, match="2 points but 1 values"):
        s.tell([{}, {}], [1.0])
    with pytest.raises(SearchError, match="not one of its choices"):
        s.tell([{"lr": 0.01, "units": 9, "dropout": 0.1, "activation": "gelu"}], [1.0])
    with pytest.raises(SearchError, match="no value for 'units'"):
        s.tell([{"lr": 0.01, "dropout": 0.1, "activation": "relu"}], [1.0])
