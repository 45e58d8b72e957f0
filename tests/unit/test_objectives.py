"""Several objectives (issue 14): the Pareto front rule, constraints, and which engines take them."""

from __future__ import annotations

import math

import pytest

from gridml import search
from gridml.errors import SearchError, SpecError
from gridml.search.study import propose
from gridml.spec import load_spec
from gridml.store import Study, Trial
from gridml.store.best import best_trial, feasible, parse_constraint, pareto_front, scores_of
from gridml.store.records import EpochReport
from tests.unit.test_spec import GOOD, write_spec

SPACE = {"x": {"type": "real", "low": 0.0, "high": 1.0}, "n": {"type": "int", "low": 1, "high": 9}}
TWO = [{"metric": "auc", "direction": "maximize"}, {"metric": "ms", "direction": "minimize"}]


def _study(**search) -> Study:
    return Study(1, "s", {"search": {"objectives": TWO, **search}}, "h")


def _trial(n: int, auc, ms, state="completed", violations=None) -> Trial:
    return Trial(n, 1, n, {"x": n / 10, "n": 1}, state=state, objective=auc, objectives=[auc, ms],
                 violations=violations)


def test_front_respects_directions_and_leaves_out_nan_failed_infeasible():
    trials = [_trial(0, 0.9, 5.0), _trial(1, 0.8, 1.0), _trial(2, 0.8, 2.0),  # 2: dominated by 1
              _trial(3, 0.95, 9.0), _trial(4, 0.99, math.nan), _trial(5, None, 0.1),
              _trial(6, 0.99, 0.5, state="failed"), _trial(7, 0.99, 0.5, violations=[0.3]),
              _trial(8, 0.9, 5.0)]  # equal to 0: both on the front
    assert [t.number for t in pareto_front(_study(), trials)] == [0, 1, 3, 8]
    flipped = Study(1, "s", {"search": {"objectives": [TWO[0] | {"direction": "minimize"}, TWO[1]]}}, "h")
    assert [t.number for t in pareto_front(flipped, trials)] == [1]
    assert not feasible(trials[7]) and feasible(trials[0])
    assert not feasible(_trial(9, 1.0, 0.1, violations=[None]))  # not reported: not met
    single = Study(1, "s", {"search": {"objective": "auc", "direction": "maximize"}}, "h")
    rest = [t for t in trials if t.number != 4]
    assert best_trial(single, rest).number == 3  # 7 (0.99, infeasible) is never best


def test_scores_and_constraint_parsing():
    epochs = [EpochReport(1, {"val_auc": 0.7, "inference_ms": 3.0}, 1.0),
              EpochReport(2, {"val_auc": 0.8, "inference_ms": 3.0}, 1.0)]
    s = {"objectives": [{"metric": "val_auc", "direction": "maximize"},
                        {"metric": "inference_ms"}], "constraints": ["inference_ms <= 2", "val_auc>0.5"]}
    assert scores_of(epochs, s) == {"objective": 0.8, "objectives": [0.8, 3.0],
                                    "violations": [1.0, 0.0]}
    assert scores_of(epochs, {"objective": "val_auc"}) == {"objective": 0.8, "objectives": None,
                                                           "violations": None}
    c = parse_constraint(" model_mb < 1e-1 ")
    assert (c.metric, c.op, c.bound) == ("model_mb", "<", 0.1)
    assert c.violation(0.1) > 0 and c.violation(0.05) == 0 and c.violation(None) is None
    for bad in ("inference_ms == 2", "<= 2", "ms <= two", 3):
        with pytest.raises(ValueError, match="is not a constraint; write '<metric> <op> <number>'"):
            parse_constraint(bad)


@pytest.mark.parametrize("algorithm, options", [("bayes", {}), ("skopt", {}), ("grid", {}),
                                                ("evolution", {}), ("external", {}),
                                                ("optuna", {"sampler": "cmaes"})])
def test_single_objective_engines_refuse(algorithm, options):
    with pytest.raises(SearchError, match=r"^search.objectives: algorithm .* optimises a single"):
        search.create(algorithm, SPACE, directions=["maximize", "minimize"], **options)
    with pytest.raises(SearchError, match=r"^search.constraints: algorithm .* cannot take"):
        search.create(algorithm, SPACE, constraints=1, **options)


@pytest.mark.parametrize("algorithm, options", [("random", {}), ("optuna", {"sampler": "nsgaii"}),
                                                ("optuna", {})])
def test_multi_objective_engines_are_told_vectors(algorithm, options):
    spec = {"algorithm": algorithm, "space": SPACE, "options": options, "objectives": TWO,
            "constraints": ["ms <= 6"], "seed": 2}
    trials: list[Trial] = []
    for _ in range(4):
        for point in propose(spec, trials, 3)[0]:
            n = len(trials)
            auc, ms = point["x"], float(point["n"])
            trials.append(Trial(n, 1, n, point, state="completed", objective=auc,
                                objectives=[auc, ms], violations=[max(0.0, ms - 6)]))
    keys = {tuple(sorted(t.hparams.items())) for t in trials}
    assert len(keys) == 12  # never a told or pending point again
    front = pareto_front(_study(constraints=["ms <= 6"]), trials)
    assert front and all(t.objectives[1] <= 6 for t in front)


def test_validate_refuses_objectives_the_engine_cannot_take(tmp_path):
    two = ("  objectives: [{metric: val_auc, direction: maximize}, {metric: inference_ms}]\n"
           '  constraints: ["inference_ms <= 2"]\n')
    text = GOOD.replace("  objective: val_loss\n", two)
    with pytest.raises(SpecError) as err:
        load_spec(write_spec(tmp_path, text))
    msg = str(err.value)
    assert "search.objectives: algorithm 'bayes' optimises a single objective" in msg
    only = GOOD.replace("  objective: val_loss\n", '  constraints: ["inference_ms <= 2"]\n')
    with pytest.raises(SpecError, match="search.constraints: algorithm 'bayes' cannot take"):
        load_spec(write_spec(tmp_path, only))
    loaded = load_spec(write_spec(tmp_path, text.replace("algorithm: bayes", "algorithm: random")))
    assert (loaded.spec.search.objective, loaded.spec.search.direction) == ("val_auc", "maximize")
    with pytest.raises(SpecError, match="not reported"):
        load_spec(write_spec(tmp_path, text.replace("algorithm: bayes", "algorithm: random")
                             .replace("{metric: inference_ms}", "{metric: latency}")))
    with pytest.raises(SpecError, match="give either objective/direction or objectives"):
        load_spec(write_spec(tmp_path, text.replace("algorithm: bayes", "algorithm: random")
                             .replace("  max_trials", "  direction: minimize\n  max_trials")))


def test_torch_cost_metrics():
    torch = pytest.importorskip("torch")
    import numpy as np

    from payloads.runtime import costs

    model = torch.nn.Sequential(torch.nn.Linear(10, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
    rows = costs.sample({"x": np.ones((100, 10)), "y": np.ones(100)}, ["x"])
    assert rows[0].shape == (costs.BATCH, 10) and rows[0].dtype == np.float32
    got = costs.torch_costs(model, rows, torch.device("cpu"))
    assert got["n_params"] == 10 * 8 + 8 + 8 + 1 and got["model_mb"] > 0 and got["inference_ms"] > 0
    assert model.training  # put back as it was
    assert "inference_ms" not in costs.torch_costs(model, costs.sample({"x": None}, ["x"]),
                                                   torch.device("cpu"))
