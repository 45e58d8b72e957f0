"""One parameter of the search space (checked by ``validate.py``): mapping its values.

Internally a parameter's values live in numpy arrays: floats for real and int parameters, choice
indices for categoricals. ``plain`` turns one back into a JSON-friendly Python value.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from gridml.errors import SearchError
from gridml.search.validate import same_choice

@dataclass(frozen=True)
class Param:
    name: str
    type: str  # real | int | categorical
    low: float = 0.0
    high: float = 1.0
    log: bool = False
    choices: tuple[Any, ...] = ()
    condition: Mapping[str, Any] | None = None  # {parent: value or [values]}

    # ---- unit cube ----------------------------------------------------------------------------
    def from_unit(self, u: np.ndarray) -> np.ndarray:
        """Values for coordinates ``u`` in [0, 1]: uniform (or log-uniform) over the range."""
        if self.type == "categorical":
            return np.minimum((u * len(self.choices)).astype(int), len(self.choices) - 1)
        top = self.high + 1 if self.type == "int" else self.high
        lo, hi = (math.log(self.low), math.log(top)) if self.log else (self.low, top)
        x = lo + u * (hi - lo)
        x = np.exp(x) if self.log else x
        if self.type == "int":
            return np.clip(np.floor(x), self.low, self.high)
        return np.clip(x, self.low, self.high)

    def to_unit(self, values: np.ndarray) -> np.ndarray:
        """The centre of each value's cell in the unit cube (inverse of :meth:`from_unit`)."""
        if self.type == "categorical":
            return (values + 0.5) / len(self.choices)
        top = self.high + 1 if self.type == "int" else self.high
        x = values + 0.5 if self.type == "int" else values
        if self.log:
            return (np.log(x) - math.log(self.low)) / (math.log(top) - math.log(self.low))
        return (x - self.low) / (top - self.low)

    # ---- user values -----------------------------------------------------------------------
    def column(self, raw: Sequence[Any]) -> np.ndarray:
        """An array of user values (None where absent) in the internal representation."""
        if self.type == "categorical":
            return np.array([0 if v is None else self.index(v) for v in raw], dtype=int)
        try:
            return np.array([np.nan if v is None else float(v) for v in raw], dtype=float)
        except (TypeError, ValueError) as exc:
            raise SearchError(f"parameter {self.name!r}: non-numeric value in {list(raw)}",
                              hint=f"{self.type} parameters take numbers") from exc

    def index(self, value: Any) -> int:
        for i, c in enumerate(self.choices):
            if same_choice(c, value):
                return i
        raise SearchError(f"parameter {self.name!r}: {value!r} is not one of its choices "
                          f"{list(self.choices)}", hint="use one of the choices of the space")

    def plain(self, v: Any) -> Any:
        if self.type == "categorical":
            return self.choices[int(v)]
        return round(float(v)) if self.type == "int" else float(v)

    def key_of(self, v: Any) -> Any:
        if self.type == "real":
            return float(f"{float(v):.10g}")
        return round(float(v))

    def matches(self, values: np.ndarray, allowed: Any) -> np.ndarray:
        wanted = allowed if isinstance(allowed, (list, tuple)) else [allowed]
        if self.type == "categorical":
            return np.isin(values, [self.index(w) for w in wanted])
        return np.isin(values, [float(w) for w in wanted])

    def cardinality(self) -> float:
        if self.type == "categorical":
            return len(self.choices)
        return self.high - self.low + 1 if self.type == "int" else math.inf


def make_param(name: str, spec: Mapping[str, Any]) -> Param:
    """The :class:`Param` of a dimension that :mod:`gridml.search.validate` found valid."""
    cond = spec.get("conditional") or None
    if spec["type"] == "categorical":
        return Param(name, "categorical", choices=tuple(spec["choices"]), condition=cond)
    return Param(name, spec["type"], float(spec["low"]), float(spec["high"]),
                 bool(spec.get("log", False)), condition=cond)
