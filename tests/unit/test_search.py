"""Searcher specifics: grid enumeration, bayes, bad spaces and arguments (the contract every engine
meets is tests/unit/test_search_contract.py)."""

from __future__ import annotations


import pytest

from gridml import search
from gridml.errors import SearchError, SpecError

from tests.unit.search_toys import CONDITIONAL, SPACE, run


def test_bayes_improves_on_its_initial_design():
    _, values = run("bayes", rounds=6, batch=3, n_initial_points=6)
    assert min(values[6:]) < min(values[:6])


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


def test_unknown_algorithm_and_options_are_refused_clearly():
    with pytest.raises(SearchError, match="use one of bayes, skopt, optuna, random, grid, evolution"):
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


def test_tell_refuses_points_outside_the_space_in_one_line():
    s = search.create("random", SPACE)
    with pytest.raises(SearchError) as info:
        s.tell([{"lr": 0.5, "units": 9, "dropout": 0.1, "activation": "relu"}], [1.0])
    assert str(info.value).startswith("tell: point[0].lr: 0.5 is outside [0.0001, 0.1]")
    assert "\n" not in str(info.value)


def test_one_validator_for_points():
    space = {**CONDITIONAL, "act": {"type": "categorical", "choices": [True, "x"]}}
    good = {"optimizer": "adam", "lr": 0.01, "layers": 3, "act": True}
    assert search.point_problems(space, good) == []
    assert search.point_problems(space, {**good, "optimizer": "sgd"}) == [
        "hparams.momentum: no value for 'momentum'; give every active parameter of the space"]
    bad = search.point_problems(space, {**good, "layers": 2.5, "act": 1, "colour": "red"})
    assert [p.split(":")[0] for p in bad] == ["hparams.colour", "hparams.layers", "hparams.act"]


def test_one_cma_es_path_optunas_cmaes_sampler_points_to_evolution():
    with pytest.raises(SearchError) as err:
        search.create("optuna", SPACE, sampler="cmaes")
    assert "sampler: cmaes is not offered" in str(err.value)
    assert "algorithm: evolution" in str(err.value.hint)
    assert len(search.create("evolution", SPACE, seed=1).ask(3)) == 3
