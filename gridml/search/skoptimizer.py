"""``algorithm: skopt``: a thin adapter over scikit-optimize's own ``skopt.Optimizer``.

Rebuilt from the stored observations at every call, like every searcher: an ``Optimizer`` over
the mapped space is told every finite observation in one ``tell`` (one model fit), the pending
trials are told too, with the constant liar's value (the best observation, as ``cl_min`` does),
then ``ask(n_points=n, strategy="cl_min")`` proposes the batch. Its ``random_state`` comes from
(seed, observations + pending), so the same observations give the same batch and one more gives
a new one. Proposals equal to a told, pending or already chosen point are dropped and replaced by
uniform draws (skopt re-proposes points in small discrete spaces).

The space: real -> ``Real`` (``prior="log-uniform"`` where ``log``), int -> ``Integer`` (likewise),
categorical -> ``Categorical`` over the choice indices. A conditional parameter is always part of
skopt's space; where its condition does not hold it is told at the middle of its range (its first
choice), and it is left out of the points handed back, as random and evolution do.

Options (``search.options``), passed to ``Optimizer``: ``base_estimator`` (GP, RF, ET, GBRT;
default GP), ``acq_func`` (default gp_hedge), ``acq_optimizer`` (default sampling: skopt's
``auto`` picks L-BFGS restarts for a GP, minutes per batch on two cores), ``n_initial_points``
(default 10), ``initial_point_generator`` (default random; a sobol/halton/... design is drawn
with the study's seed while the study is in it, so each position takes the design's next point),
``acq_func_kwargs``, ``acq_optimizer_kwargs``.
"""

from __future__ import annotations

import warnings
from typing import Any, ClassVar

import numpy as np
from skopt import Optimizer  # third-party: this module is imported only by create("skopt")
from skopt.space import Categorical, Integer, Real

from gridml.errors import SearchError
from gridml.search.base import BaseSearcher, Point
from gridml.search.gp import one_blas_thread
from gridml.search.random import draw_novel
from gridml.search.space import Columns, Space

ESTIMATORS = ("GP", "RF", "ET", "GBRT")
ACQ_FUNCS = ("gp_hedge", "EI", "LCB", "PI")  # skopt's "ps" variants need the time per point
ACQ_OPTIMIZERS = ("sampling", "lbfgs", "auto")
GENERATORS = ("random", "sobol", "halton", "hammersly", "lhs", "grid")


class SkoptSearcher(BaseSearcher):
    name = "skopt"
    defaults: ClassVar[dict[str, Any]] = {
        "base_estimator": "GP", "acq_func": "gp_hedge", "acq_optimizer": "sampling",
        "n_initial_points": 10, "initial_point_generator": "random", "acq_func_kwargs": None,
        "acq_optimizer_kwargs": None}

    def __init__(self, space: Any, **kwargs: Any) -> None:
        super().__init__(space, **kwargs)
        _check(self.options)
        self.dimensions = dimensions(self.space)
        try:  # refuse what skopt refuses (e.g. acq_func_kwargs) now, in one line, not at ask
            self._optimizer(0)
        except (TypeError, ValueError) as exc:
            raise SearchError(f"search.options: scikit-optimize refused them: {exc}",
                              hint="see skopt.Optimizer's documentation") from None

    def _propose(self, n: int, pending: list[Point], seen: set[tuple]) -> list[Point]:
        points, y = self.observations()
        state = int(self.rng(pending).integers(2**31 - 1))
        if (opts := self.options)["initial_point_generator"] != "random" and (
                len(self.told) + len(pending) < int(opts["n_initial_points"])):
            state = self.seed % 2**31  # one design for the study: each position takes its point
        with one_blas_thread(), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "evaluated at this point before": we filter
            opt = self._optimizer(state)
            xs = self.to_skopt(points + pending)
            ys = [float(v) for v in y] + [float(np.min(y)) if len(y) else 0.0] * len(pending)
            try:
                if xs:
                    opt.tell(xs, ys)  # one fit over observations and lies
                asked = opt.ask(n_points=n, strategy="cl_min")
            except (TypeError, ValueError) as exc:  # e.g. acq_optimizer_kwargs it cannot use
                raise SearchError(f"search.options: scikit-optimize failed with them: {exc}",
                                  hint="see skopt.Optimizer's documentation") from None
        out = self.novel(self.from_skopt(asked), seen, n)
        if len(out) < n:
            out += draw_novel(self, self.rng(pending, salt=1), n - len(out), seen)
        return out

    def _optimizer(self, state: int) -> Any:
        opts = self.options
        return Optimizer(self.dimensions, base_estimator=opts["base_estimator"],
                         n_initial_points=int(opts["n_initial_points"]),
                         initial_point_generator=opts["initial_point_generator"],
                         acq_func=opts["acq_func"], acq_optimizer=opts["acq_optimizer"],
                         acq_func_kwargs=opts["acq_func_kwargs"],
                         acq_optimizer_kwargs=opts["acq_optimizer_kwargs"], random_state=state)

    def to_skopt(self, points: list[Point]) -> list[list[Any]]:
        """Rows of skopt values (inactive parameters at their imputed value)."""
        cols = self.space.columns(points)
        rows = []
        for i in range(len(points)):
            row = []
            for p, dim in zip(self.space.params, self.dimensions):
                if not cols.active[p.name][i]:
                    row.append(_middle(dim))
                elif p.type == "categorical":
                    row.append(int(cols.values[p.name][i]))
                elif p.type == "int":
                    row.append(round(float(cols.values[p.name][i])))
                else:
                    row.append(float(np.clip(cols.values[p.name][i], p.low, p.high)))
            rows.append(row)
        return rows

    def from_skopt(self, rows: list[list[Any]]) -> list[Point]:
        values = {p.name: np.array([r[j] for r in rows], dtype=float)
                  for j, p in enumerate(self.space.params)}
        values = {k: (v.astype(int) if self.space.by_name(k).type == "categorical" else v)
                  for k, v in values.items()}
        return self.space.points(_columns(self.space, values))


def dimensions(space: Space) -> list[Any]:
    """skopt dimensions for the parameters of ``space`` (in ``space.params`` order)."""
    out: list[Any] = []
    for p in space.params:
        prior = "log-uniform" if p.log else "uniform"
        if p.type == "categorical":
            out.append(Categorical(list(range(len(p.choices))), name=p.name))
        elif p.type == "int":
            out.append(Integer(int(p.low), int(p.high), prior=prior, name=p.name))
        else:
            out.append(Real(p.low, p.high, prior=prior, name=p.name))
    return out


def _middle(dim: Any) -> Any:
    if isinstance(dim, Categorical):
        return dim.categories[0]
    if dim.prior == "log-uniform":
        mid = float(np.sqrt(dim.low * dim.high))
    else:
        mid = (dim.low + dim.high) / 2
    return round(mid) if isinstance(dim, Integer) else mid


def _columns(space: Space, values: dict[str, np.ndarray]) -> Columns:
    return Columns(values, space.activity(values))


def _check(options: dict[str, Any]) -> None:
    problems = []
    for key, allowed in (("base_estimator", ESTIMATORS), ("acq_func", ACQ_FUNCS),
                         ("acq_optimizer", ACQ_OPTIMIZERS),
                         ("initial_point_generator", GENERATORS)):
        if options[key] not in allowed:
            problems.append(f"{key}: {options[key]!r} is not known; use one of {list(allowed)}")
    n0 = options["n_initial_points"]
    if isinstance(n0, bool) or not isinstance(n0, int) or n0 < 1:
        problems.append(f"n_initial_points: must be a whole number >= 1 (got {n0!r})")
    for key in ("acq_func_kwargs", "acq_optimizer_kwargs"):
        if options[key] is not None and not isinstance(options[key], dict):
            problems.append(f"{key}: must be a mapping (got {options[key]!r})")
    if options["acq_optimizer"] == "lbfgs" and options["base_estimator"] != "GP":
        problems.append("acq_optimizer: lbfgs needs base_estimator GP; use sampling")
    if problems:
        raise SearchError("search.options: " + "; ".join(problems))
