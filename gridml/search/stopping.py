"""Early stopping: should a running trial stop after this epoch?

Decisions depend only on the stored per-epoch objective values, so they are deterministic and can
be replayed. ``curve[i]`` is the objective after epoch ``i + 1``; NaN counts as the worst value.

``{rule: median, min_epochs: 2, min_trials: 3}``
    After epoch ``e >= min_epochs``: stop if the trial's best value so far is worse than the median
    of the other trials' values at epoch ``e`` (only others that reached epoch ``e`` count, and at
    least ``min_trials`` of them must have).
``{rule: asha, min_epochs: 1, reduction: 3}``
    Asynchronous successive halving. Rungs at epochs ``min_epochs * reduction**k``. At a rung, the
    trial competes with every trial that reached it (their best value up to the rung, its own
    included): it goes on only if it is in the top ``1/reduction`` (at least the best one goes on).

``decide`` returns ``(stop, reason)``; the reason says why either way, empty when no rule is set.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from gridml.errors import SpecError

RULES: dict[str, dict[str, Any]] = {
    "median": {"min_epochs": 2, "min_trials": 3},
    "asha": {"min_epochs": 1, "reduction": 3},
}


def validate_early_stopping(cfg: Mapping[str, Any] | None) -> list[str]:
    """Problems with a ``search.early_stopping`` mapping (empty list when it is fine)."""
    if cfg is None:
        return []
    if not isinstance(cfg, Mapping):
        return ["must be a mapping like {rule: median, min_epochs: 2}"]
    rule = cfg.get("rule")
    if rule not in RULES:
        return [f"rule: {rule!r} is not a rule; use one of {', '.join(RULES)}"]
    problems = [f"{key}: not an option of rule {rule!r}; it takes {sorted(RULES[rule])}"
                for key in sorted(set(cfg) - set(RULES[rule]) - {"rule"})]
    for key, lowest in (("min_epochs", 1), ("min_trials", 1), ("reduction", 2)):
        v = cfg.get(key, lowest)
        if key in RULES[rule] and (isinstance(v, bool) or not isinstance(v, int) or v < lowest):
            problems.append(f"{key}: must be a whole number >= {lowest} (got {v!r})")
    return problems


def decide(rule: Mapping[str, Any] | None, trial_curve: Sequence[float],
           other_curves: Sequence[Sequence[float]], direction: str = "minimize", *,
           metric: str = "objective") -> tuple[bool, str]:
    """Whether the trial with ``trial_curve`` should stop now, and why."""
    if not rule:
        return False, ""
    problems = validate_early_stopping(rule)
    if problems:
        raise SpecError([f"search.early_stopping.{p}" for p in problems])
    opts = {**RULES[rule["rule"]], **rule}
    sign = -1.0 if direction == "maximize" else 1.0
    mine = [_worst_if_nan(sign * v) for v in trial_curve]
    others = [[_worst_if_nan(sign * v) for v in c] for c in other_curves]
    if rule["rule"] == "median":
        return _median(opts, mine, others, sign, metric)
    return _asha(opts, mine, others, sign, metric)


def _median(opts: Mapping[str, Any], mine: list[float], others: list[list[float]], sign: float,
            metric: str) -> tuple[bool, str]:
    e = len(mine)
    if e < opts["min_epochs"]:
        return False, f"epoch {e} is before min_epochs {opts['min_epochs']}"
    at_e = sorted(c[e - 1] for c in others if len(c) >= e and math.isfinite(c[e - 1]))
    if len(at_e) < opts["min_trials"]:
        return False, (f"only {len(at_e)} other trials reached epoch {e} "
                       f"(min_trials {opts['min_trials']})")
    median = _median_of(at_e)
    best = min(mine)
    stop = best > median
    verdict = "worse than" if stop else "not worse than"
    return stop, (f"{metric} {_show(sign * best)} at epoch {e} {verdict} median "
                  f"{_show(sign * median)} of {len(at_e)} trials")


def _asha(opts: Mapping[str, Any], mine: list[float], others: list[list[float]], sign: float,
          metric: str) -> tuple[bool, str]:
    e, eta = len(mine), int(opts["reduction"])
    rung = _rung_index(e, int(opts["min_epochs"]), eta)
    if rung is None:
        return False, f"epoch {e} is not a rung (rungs at {opts['min_epochs']} x {eta}^k epochs)"
    best = min(mine)
    rivals = [min(c[:e]) for c in others if len(c) >= e]
    keep = max(1, (len(rivals) + 1) // eta)
    ahead = sum(1 for r in rivals if r < best)
    stop = ahead >= keep
    place = f"rank {ahead + 1} of {len(rivals) + 1} at rung {rung} (epoch {e})"
    verdict = "outside" if stop else "within"
    return stop, f"{metric} {_show(sign * best)}: {place}, {verdict} the top {keep} kept (1/{eta})"


def _rung_index(epoch: int, first: int, eta: int) -> int | None:
    k, r = 0, first
    while r < epoch:
        k, r = k + 1, r * eta
    return k if r == epoch else None


def _median_of(values: list[float]) -> float:
    m = len(values) // 2
    return values[m] if len(values) % 2 else 0.5 * (values[m - 1] + values[m])


def _worst_if_nan(v: float) -> float:
    return math.inf if v is None or not math.isfinite(v) else float(v)


def _show(v: float) -> str:
    return f"{v:.4g}"
