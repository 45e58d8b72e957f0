"""``algorithm: optuna``: an Optuna sampler driven by ask-and-tell on a study rebuilt every call.

Every call builds an in-memory ``optuna`` study from the stored observations: each told point
becomes a finished trial (``optuna.trial.create_trial`` + ``study.add_trial``; a failed one,
value None/NaN, as ``TrialState.FAIL``), each pending point a ``RUNNING`` trial so the sampler
knows it is being evaluated; then ``study.ask()`` is called ``n`` times, each asked trial
suggesting the parameters in an order where a condition's parent comes first (a conditional
parameter is suggested only where its condition holds: Optuna's own define-by-run conditionals).
The asked trials stay RUNNING, so later asks of the batch see them. The sampler is seeded from
(seed, observations + pending): the same observations give the same batch.

Options (``search.options``): ``sampler``: ``tpe`` (default), ``nsgaii``, ``gp``, ``qmc`` or
``random``; every other option is passed to the sampler's constructor (e.g.
``n_startup_trials``, ``multivariate``), and an option the chosen sampler does not take is
refused naming the ones it takes. ``tpe`` defaults to ``constant_liar: true`` (pending and
in-batch trials are treated as bad results instead of ignored) unless given. ``gp`` needs PyTorch:
without it the searcher says so. ``cmaes`` (Optuna's CmaEsSampler) is refused, pointing to
``algorithm: evolution``: gridml keeps one CMA-ES path, the ``cma`` package's (why: see
gridml/search/evolution.py).

Several objectives (``search.objectives``): samplers ``tpe`` and ``nsgaii`` on a study built with
``directions=``, each told trial carrying its vector. Constraints (``search.constraints``): the
same two samplers get a ``constraints_func`` and each told trial its violations (Optuna's
``constraints`` system attribute: <= 0 feasible).
"""

from __future__ import annotations

import inspect
import warnings
from collections.abc import Mapping
from typing import Any, ClassVar

import optuna  # third-party: this module is imported only by create("optuna")

from gridml.errors import SearchError
from gridml.search.base import BaseSearcher, Point
from gridml.search.params import Param
from gridml.search.random import draw_novel
from gridml.search.space import Space
from gridml.search.validate import same_choice

SAMPLERS: dict[str, str] = {"tpe": "TPESampler", "nsgaii": "NSGAIISampler", "gp": "GPSampler",
                            "qmc": "QMCSampler", "random": "RandomSampler"}
NEEDS = {"gp": "torch"}  # optional packages some samplers import when used
REDIRECT = {"cmaes": "algorithm: evolution, gridml's one CMA-ES (the cma package)"}
RETRIES = 4  # extra asks per wanted point when the sampler repeats a told or pending point
MULTI = ("tpe", "nsgaii")  # the samplers taking several objectives and constraints here
CONSTRAINTS_KEY = "constraints"  # the system attribute Optuna's samplers read violations from

optuna.logging.set_verbosity(optuna.logging.ERROR)  # no per-trial chatter in gridml's output


class OptunaSearcher(BaseSearcher):
    name = "optuna"
    defaults: ClassVar[dict[str, Any]] = {"sampler": "tpe"}

    @classmethod
    def accepted(cls, options: Mapping[str, Any]) -> set[str]:
        kind = options.get("sampler", "tpe")
        if kind not in SAMPLERS:
            return {"sampler"}
        params = inspect.signature(getattr(optuna.samplers, SAMPLERS[kind])).parameters
        return {"sampler"} | {k for k in params if k not in ("seed", "constraints_func")}

    @classmethod
    def supports(cls, options: Mapping[str, Any]) -> tuple[bool, bool]:
        ok = options.get("sampler", "tpe") in MULTI
        return ok, ok

    def __init__(self, space: Any, **kwargs: Any) -> None:
        super().__init__(space, **kwargs)
        kind = self.options["sampler"]
        if kind in REDIRECT:
            raise SearchError(f"search.options.sampler: {kind} is not offered",
                              hint=f"use {REDIRECT[kind]}")
        if kind not in SAMPLERS:
            raise SearchError(f"search.options.sampler: {kind!r} is not known",
                              hint=f"use one of {', '.join(SAMPLERS)}")
        if kind in NEEDS:
            try:
                __import__(NEEDS[kind])
            except ImportError as exc:
                raise SearchError(f"search.options.sampler: {kind} needs the {NEEDS[kind]} "
                                  "package, which is not installed",
                                  hint=f"install {NEEDS[kind]} or use sampler: tpe") from exc
        self.kwargs = {k: v for k, v in self.options.items() if k != "sampler"}
        if kind == "tpe":
            self.kwargs.setdefault("constant_liar", True)
        if self.n_constraints:
            self.kwargs["constraints_func"] = _constraints
        self.distributions = distributions(self.space)

    def _propose(self, n: int, pending: list[Point], seen: set[tuple]) -> list[Point]:
        # QMC's position in its sequence is the number of trials: its seed must stay the study's
        seed = self.seed % 2**31 if self.options["sampler"] == "qmc" else int(
            self.rng(pending).integers(2**31 - 1))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # ExperimentalWarning of some samplers and options
            try:
                sampler = getattr(optuna.samplers, SAMPLERS[self.options["sampler"]])(
                    seed=seed, **self.kwargs)
            except (TypeError, ValueError) as exc:
                raise SearchError(f"search.options: the {self.options['sampler']} sampler "
                                  f"refused them: {exc}",
                                  hint="see Optuna's documentation of the sampler") from exc
            study = self.study(sampler, pending)
            out: list[Point] = []
            for _ in range(n * (1 + RETRIES)):
                trial = study.ask()
                point = suggest(trial, self.space)
                out += self.novel([point], seen, 1)
                if len(out) == n:
                    return out
        return out + draw_novel(self, self.rng(pending, salt=1), n - len(out), seen)

    def study(self, sampler: Any, pending: list[Point]) -> Any:
        """An in-memory study holding the told points (finished or failed) and the pending ones."""
        study = optuna.create_study(directions=["minimize"] * len(self.directions),
                                    sampler=sampler)
        flips = [-1.0 if d == "maximize" else 1.0 for d in self.directions]
        state = optuna.trial.TrialState
        for point, vector, violations in zip(self.told, self.vectors, self.violations):
            params, dists = self.active(point)
            attrs = ({CONSTRAINTS_KEY: list(violations or [1e12] * self.n_constraints)}
                     if self.n_constraints else {})
            if vector is None:
                trial = optuna.trial.create_trial(params=params, distributions=dists,
                                                  state=state.FAIL, system_attrs=attrs)
            else:
                trial = optuna.trial.create_trial(params=params, distributions=dists,
                                                  values=[f * v for f, v in zip(flips, vector)],
                                                  system_attrs=attrs)
            study.add_trial(trial)
        for point in pending:
            params, dists = self.active(point)
            study.add_trial(optuna.trial.create_trial(params=params, distributions=dists,
                                                      state=state.RUNNING))
        return study

    def active(self, point: Point) -> tuple[dict[str, Any], dict[str, Any]]:
        """The parameters of ``point`` that exist (conditions applied) and their distributions."""
        cols = self.space.columns([point])
        names = [p.name for p in self.space.params if cols.active[p.name][0]]
        params = {k: self.space.by_name(k).plain(cols.values[k][0]) for k in names}
        return params, {k: self.distributions[k] for k in names}


def _constraints(trial: Any) -> list[float]:
    """The violations a told trial carries (asked trials are never finished here)."""
    return list(trial.system_attrs.get(CONSTRAINTS_KEY) or [])


def distributions(space: Space) -> dict[str, Any]:
    """Optuna distributions of the parameters of ``space``."""
    return {p.name: _distribution(p) for p in space.params}


def _distribution(p: Param) -> Any:
    d = optuna.distributions
    if p.type == "categorical":
        return d.CategoricalDistribution(list(p.choices))
    if p.type == "int":
        return d.IntDistribution(int(p.low), int(p.high), log=p.log)
    return d.FloatDistribution(p.low, p.high, log=p.log)


def suggest(trial: Any, space: Space) -> Point:
    """A point suggested by ``trial``, parents before children, inactive parameters skipped."""
    point: Point = {}
    for p in space.params:
        if all(parent in point and _holds(point[parent], allowed)
               for parent, allowed in (p.condition or {}).items()):
            if p.type == "categorical":
                point[p.name] = trial.suggest_categorical(p.name, list(p.choices))
            elif p.type == "int":
                point[p.name] = trial.suggest_int(p.name, int(p.low), int(p.high), log=p.log)
            else:
                point[p.name] = trial.suggest_float(p.name, p.low, p.high, log=p.log)
    return {name: point[name] for name in space.names if name in point}


def _holds(value: Any, allowed: Any) -> bool:
    wanted = allowed if isinstance(allowed, (list, tuple)) else [allowed]
    return any(same_choice(w, value) for w in wanted)
