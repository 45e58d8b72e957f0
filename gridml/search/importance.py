"""Which hyperparameters matter: Optuna's fANOVA importance on a study's finished trials.

    from gridml.search.importance import importance
    importance(search_section, trials)   # {"lr": 0.71, "units": 0.2, "dropout": 0.09}

The study is rebuilt in memory exactly as ``algorithm: optuna`` does it (every finished trial with
a finite objective, its active parameters and their distributions), then
``optuna.importance.get_param_importances`` with the ``FanovaImportanceEvaluator`` (a random
forest fitted to the objective, its variance split over the parameters; seeded, so the same trials
give the same shares). Shares sum to 1, largest first. Only parameters present in every finished
trial are assessed (a conditional parameter that is sometimes inactive is left out), and fewer
than ``MIN_TRIALS`` finished trials give ``{}``: too little to say.
"""

from __future__ import annotations

import warnings

import optuna  # third-party: imported by `gridml status`, which shows the shares

from gridml.search.optuna_sampler import OptunaSearcher
from gridml.search.space import Space
from gridml.search.study import observations
from gridml.store import Trial
from gridml.store.best import SearchLike
from gridml.store.spec import stored_search

MIN_TRIALS = 5


def importance(search: SearchLike, trials: list[Trial], seed: int = 0) -> dict[str, float]:
    """``{parameter: share}`` of the objective's variance, from the finished trials."""
    points, values, _ = observations(trials)
    finite = [(p, v) for p, v in zip(points, values) if v is not None]
    if len(finite) < MIN_TRIALS:
        return {}
    search = stored_search(search)
    space = Space(search.space_dict())  # checked: one validator
    engine = OptunaSearcher(space, direction=search.direction, sampler="random")
    engine.tell([p for p, _ in finite], [v for _, v in finite])
    study = engine.study(optuna.samplers.RandomSampler(seed=seed), [])
    if len({t.value for t in study.trials}) < 2:
        return {}  # a constant objective: nothing explains anything
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        shares = optuna.importance.get_param_importances(
            study, evaluator=optuna.importance.FanovaImportanceEvaluator(seed=seed))
    return {k: float(v) for k, v in shares.items()}
