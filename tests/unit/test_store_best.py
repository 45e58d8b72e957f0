"""The one rule for objectives and the best trial (gridml.store.best)."""

from __future__ import annotations

import math

from gridml.store import EpochReport, Study, Trial, best_trial, objective_of, pick_best


def study(direction: str = "minimize") -> Study:
    return Study(id=1, name="s", spec={"search": {"objective": "val_loss", "direction": direction}},
                 spec_hash="h")


def trial(number: int, objective: float | None, state: str = "completed") -> Trial:
    return Trial(id=number + 10, study_id=1, number=number, hparams={}, state=state,
                 objective=objective)


def test_minimize_and_maximize_are_respected() -> None:
    trials = [trial(0, 0.5), trial(1, 0.2), trial(2, 0.9)]
    assert best_trial(study("minimize"), trials).number == 1
    assert best_trial(study("maximize"), trials).number == 2


def test_none_nan_and_infinite_objectives_are_never_best() -> None:
    trials = [trial(0, math.nan), trial(1, None), trial(2, -math.inf), trial(3, 0.7)]
    assert best_trial(study("minimize"), trials).number == 3
    assert best_trial(study("maximize"), [trial(0, math.inf), trial(1, 0.1)]).number == 1
    assert best_trial(study(), [trial(0, math.nan), trial(1, None)]) is None


def test_only_completed_trials_and_ties_go_to_the_lower_number() -> None:
    trials = [trial(0, 0.1, "pruned"), trial(1, 0.1, "failed"), trial(2, 0.3), trial(3, 0.3)]
    assert best_trial(study(), trials).number == 2
    assert best_trial(study(), []) is None
    assert pick_best([(0.3, 5, "a"), (0.3, 4, "b")], "minimize") == "b"


def test_unknown_direction_minimizes() -> None:
    assert best_trial(study("sideways"), [trial(0, 2.0), trial(1, 1.0)]).number == 1


def test_objective_is_the_last_value_of_the_metric_none_when_it_diverged() -> None:
    reps = [EpochReport(1, {"val_loss": 0.5}, 1.0), EpochReport(2, {"val_loss": math.nan}, 1.0),
            EpochReport(3, {"loss": 0.1}, 1.0)]
    assert objective_of(reps, "val_loss") is None  # epoch 2 (the last with val_loss) is NaN
    assert objective_of(reps[:1] + reps[2:], "val_loss") == 0.5
    assert objective_of(reps, "val_auc") is None
    assert objective_of([EpochReport(1, {"val_loss": math.inf}, 1.0)], "val_loss") is None
    assert objective_of([], "val_loss") is None


def test_search_and_controller_share_the_rule() -> None:
    import gridml.controller
    import gridml.search.study

    assert gridml.search.study.objective_of is objective_of
    import gridml.store.best

    assert gridml.controller.scores_of is gridml.store.best.scores_of  # built on objective_of
