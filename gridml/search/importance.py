"""Which hyperparameters matter: Optuna's fANOVA importance on a study's finished trials.

    from gridml.search.importance import importance
    importance(search_section, trials)   # {"lr": 0.71, "units": 0.2, "dropout": 0.09}

The study is rebuilt in memory exactly as ``algorithm: optuna`` does it (every finished trial with
a finite objective, its active parameters and their distributions), then
``optuna.importance.get_param_importances`` with the ``FanovaImportanceEvaluator`` (a random
forest fitted to the objective, its variance split over the parameters; seeded, so the same trials
give the same shares). Shares sum to 1, largest first. Only parameters present in every finished
trial are assessed (a conditional parameter that is sometimes inactive is left out), a trial
whose point lies outside the space (added by hand or through the API before the space was what it
is) is left out (the forest splits the space's own ranges), and fewer than ``MIN_TRIALS`` such
finished trials give ``{}``: too little to say. Above ``MAX_TRIALS`` the forest is fitted to a
seeded sample of that many: its time grows with the trials (on 2 cores: 5 s for 500, 25 s for
2,000, 160 s for 10,000), while the shares it finds settle long before.

The forest costs ~3 s of CPU (sklearn's import most of it), and ``gridml status``, ``best`` and
the dashboard ask again and again for trials that have not changed: the shares are kept by a key
over everything they depend on (the space, the direction, the seed, each finished trial's point
and value), in this process and, given ``cache``, in a file (the study's runs folder).
"""

from __future__ import annotations

import hashlib
import json
import os
import warnings
from pathlib import Path

from gridml.search.space import Space
from gridml.search.validate import first_point_problem
from gridml.search.study import observations
from gridml.store import Trial
from gridml.store.best import SearchLike
from gridml.store.spec import Search, stored_search

MIN_TRIALS = 5
MAX_TRIALS = 500  # the forest's sample of a bigger study's finished trials (seeded)


_KNOWN: dict[str, dict[str, float]] = {}  # key -> shares, in this process (the server's)
_KEEP = 256  # the newest keys (every finished trial makes a study's key new): bounded for a server


def importance(search: SearchLike, trials: list[Trial], seed: int = 0,
               cache: Path | None = None) -> dict[str, float]:
    """``{parameter: share}`` of the objective's variance, from the finished trials; ``cache``:
    a file that keeps the last shares and their key."""
    points, values, _ = observations(trials)
    search = stored_search(search)
    spec = search.space_dict()
    finite = [(p, v) for p, v in zip(points, values)
              if v is not None and not first_point_problem(spec, [p], "point")]
    if len(finite) < MIN_TRIALS:
        return {}
    key = hashlib.sha256(json.dumps(
        [spec, search.direction, seed, finite], sort_keys=True, default=str)
        .encode()).hexdigest()
    if key in _KNOWN:
        return dict(_KNOWN[key])
    kept = _read(cache, key)
    if kept is None:
        kept = _fanova(search, _sample(finite, seed), seed)
        _write(cache, key, kept)
    _KNOWN[key] = kept
    while len(_KNOWN) > _KEEP:  # the oldest first (dicts keep their insertion order)
        del _KNOWN[next(iter(_KNOWN))]
    return dict(kept)


def _sample(finite: list[tuple[dict, float]], seed: int) -> list[tuple[dict, float]]:
    """At most ``MAX_TRIALS`` of them, the same ones for the same trials (seeded), in order."""
    if len(finite) <= MAX_TRIALS:
        return finite
    import numpy as np

    chosen = np.random.default_rng(seed).choice(len(finite), MAX_TRIALS, replace=False)
    return [finite[i] for i in sorted(chosen)]


def _read(cache: Path | None, key: str) -> dict[str, float] | None:
    if cache is None:
        return None
    try:
        doc = json.loads(cache.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(doc, dict) or doc.get("key") != key or not isinstance(doc.get("shares"), dict):
        return None
    return {str(k): float(v) for k, v in doc["shares"].items()}


def _write(cache: Path | None, key: str, shares: dict[str, float]) -> None:
    """Atomically (a reader sees the old file or the new one); a folder that cannot be written
    (a read-only copy of the runs) only means the next call computes again."""
    if cache is None:
        return
    tmp = cache.with_name(f".{cache.name}.{os.getpid()}.tmp")
    try:
        cache.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(json.dumps({"key": key, "shares": shares}))
        os.replace(tmp, cache)
    except OSError:
        tmp.unlink(missing_ok=True)


def _fanova(search: Search, finite: list[tuple[dict, float]], seed: int) -> dict[str, float]:
    import optuna  # third-party, ~0.3 s: only when there are shares to compute

    from gridml.search.optuna_sampler import OptunaSearcher

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
