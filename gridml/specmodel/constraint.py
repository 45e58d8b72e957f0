"""``search.constraints`` entries: ``<metric> <op> <number>`` (pure Python).

The spec model refuses a malformed one at validation; the store (``gridml.store.best``, which
re-exports these names) measures every finished trial against them.
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


def usable(value: Any) -> bool:
    """Whether ``value`` can be an objective: a finite number."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


OPS: dict[str, Callable[[float, float], bool]] = {
    "<=": operator.le, "<": operator.lt, ">=": operator.ge, ">": operator.gt}
_CONSTRAINT = re.compile(r"^\s*([A-Za-z_][\w.]*)\s*(<=|>=|<|>)\s*"
                         r"([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*$")


@dataclass(frozen=True)
class Constraint:
    """``<metric> <op> <number>``: a trial is feasible when its metric (last epoch's finite
    value, the objective rule) satisfies it."""

    metric: str
    op: str
    bound: float

    def violation(self, value: Any) -> float | None:
        """0.0 when satisfied, else by how much it is missed (> 0); None: metric not reported."""
        if not usable(value):
            return None
        if OPS[self.op](float(value), self.bound):
            return 0.0
        return max(abs(float(value) - self.bound), 1e-12)

    def __str__(self) -> str:
        return f"{self.metric} {self.op} {self.bound:g}"


def parse_constraint(text: Any) -> Constraint:
    """``"inference_ms <= 2"`` -> Constraint; ValueError (with the fix) when malformed."""
    m = _CONSTRAINT.match(text) if isinstance(text, str) else None
    if m is None:
        raise ValueError(f"{text!r} is not a constraint; write '<metric> <op> <number>' with op "
                         "one of <=, <, >=, > (e.g. 'inference_ms <= 2')")
    return Constraint(m[1], m[2], float(m[3]))
