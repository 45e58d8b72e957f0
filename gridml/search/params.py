"""One parameter of the search space: checking its spec and mapping its values.

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

KNOWN_KEYS = {"type", "low", "high", "log", "choices", "conditional"}


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
            if c == value and isinstance(c, bool) == isinstance(value, bool):
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

    def check_allowed(self, allowed: Any) -> list[str]:
        """Problems with a condition's value(s) for this (parent) parameter."""
        wanted = allowed if isinstance(allowed, (list, tuple)) else [allowed]
        if self.type == "categorical":
            bad = [w for w in wanted if not any(c == w for c in self.choices)]
            return [f"{w!r} is not a choice of {self.name!r}; use one of {list(self.choices)}"
                    for w in bad]
        bad = [w for w in wanted if not isinstance(w, (int, float)) or not
               self.low <= w <= self.high]
        return [f"{w!r} is outside {self.name!r}'s range [{self.low}, {self.high}]" for w in bad]

    def cardinality(self) -> float:
        if self.type == "categorical":
            return len(self.choices)
        return self.high - self.low + 1 if self.type == "int" else math.inf


def parse_param(name: str, spec: Any, problems: list[str]) -> Param | None:
    """A :class:`Param` from its spec, or None after appending what is wrong to ``problems``."""
    where = f"search.space.{name}"
    if not isinstance(spec, Mapping):
        problems.append(f"{where}: must be a mapping like {{type: real, low: 0.0, high: 1.0}}")
        return None
    before = len(problems)
    unknown = sorted(set(spec) - KNOWN_KEYS)
    if unknown:
        problems.append(f"{where}: unknown key(s) {unknown}; allowed: {sorted(KNOWN_KEYS)}")
    kind = spec.get("type")
    if kind not in ("real", "int", "categorical"):
        problems.append(f"{where}.type: {kind!r} is not a type; use real, int or categorical")
        return None
    cond = spec.get("conditional")
    if cond is not None and (not isinstance(cond, Mapping) or not cond):
        problems.append(f"{where}.conditional: must be a mapping {{parameter: value}}")
        cond = None
    if kind == "categorical":
        param = _categorical(name, spec, cond, problems)
    else:
        param = _numeric(name, kind, spec, cond, problems)
    return param if len(problems) == before else None


def _categorical(name: str, spec: Mapping[str, Any], cond: Any, problems: list[str]) -> Param:
    where = f"search.space.{name}"
    choices = spec.get("choices")
    if not isinstance(choices, (list, tuple)) or not choices:
        problems.append(f"{where}.choices: categorical needs a non-empty list of choices")
        choices = [None]
    elif len({repr(c) for c in choices}) != len(choices):
        problems.append(f"{where}.choices: {list(choices)} has repeated choices; list each once")
    for key in ("low", "high"):
        if spec.get(key) is not None:
            problems.append(f"{where}.{key}: categorical takes `choices`, not low/high; remove it")
    return Param(name, "categorical", choices=tuple(choices), condition=cond)


def _numeric(name: str, kind: str, spec: Mapping[str, Any], cond: Any,
             problems: list[str]) -> Param:
    where = f"search.space.{name}"
    low, high, log = spec.get("low"), spec.get("high"), bool(spec.get("log", False))
    if spec.get("choices") is not None:
        problems.append(f"{where}.choices: a {kind} parameter takes low/high, not choices")
    bad = [(k, v) for k, v in (("low", low), ("high", high))
           if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v)]
    problems += [f"{where}.{k}: {kind} needs a finite number (got {v!r})" for k, v in bad]
    if bad:
        return Param(name, kind)
    low, high = float(low), float(high)  # type: ignore[arg-type]
    if low >= high:
        problems.append(f"{where}.high: empty or inverted range, low ({low}) must be < high "
                        f"({high}); swap or widen them")
    if log and low <= 0:
        problems.append(f"{where}.low: must be > 0 for a log range (got {low}); use a positive "
                        "low or log: false")
    if kind == "int" and (low != int(low) or high != int(high)):
        problems.append(f"{where}.low: int bounds must be whole numbers (got {low}, {high})")
    return Param(name, kind, low, high, log, condition=cond)
