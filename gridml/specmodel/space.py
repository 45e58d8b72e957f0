"""The one validator of search spaces and of points in them (pure Python: no pydantic, no numpy).

It lives on the spec models' floor (:mod:`gridml.specmodel`, below the store and the searchers)
so the models can apply it; ``gridml.search.validate`` re-exports it. Used by everything that
checks a ``search.space`` or a point:

* the spec (``gridml.specmodel.model``): ``Dimension`` and ``Search`` call :func:`dimension_problems`
  and :func:`condition_problems`, so ``gridml validate`` prints
  ``file:line: search.space.lr.high: ...; fix`` with the line of the field;
* the searchers (:class:`gridml.search.space.Space` refuses a space with
  :func:`space_problems`, ``tell`` checks points with :func:`point_problems`);
* the metrics API's enqueue route (``POST /api/v1/studies/{study}/trials``) and
  ``search.initial_points`` / ``search.warm_start`` check points with :func:`point_problems`.

A :class:`Problem` names the field under ``search.space`` and says what is wrong and how to fix it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

KNOWN_KEYS = ("type", "low", "high", "log", "choices", "conditional")
TYPES = ("real", "int", "categorical")


@dataclass(frozen=True)
class Problem:
    """One problem: ``path`` under ``search.space`` (parameter, field, ...) and the message."""

    path: tuple[str, ...]
    message: str

    def __str__(self) -> str:
        return self.under("search.space")

    def under(self, prefix: str, skip: int = 0) -> str:
        """``prefix.path...: message`` leaving out the first ``skip`` parts of the path."""
        parts = [prefix] if prefix else []
        return ".".join(parts + list(self.path[skip:])) + f": {self.message}"


def clean(spec: Any) -> Any:
    """A dimension's mapping without keys set to None (the spec's JSON form carries them)."""
    return {k: v for k, v in spec.items() if v is not None} if isinstance(spec, Mapping) else spec


def space_problems(space: Any) -> list[Problem]:
    """Every problem with a ``search.space`` mapping (empty when it is fine)."""
    if not isinstance(space, Mapping) or not space:
        return [Problem((), "must be a non-empty mapping of parameter name -> "
                            "{type: real|int|categorical, ...}")]
    problems: list[Problem] = []
    for name, spec in space.items():
        problems += dimension_problems(str(name), spec)
    return problems + condition_problems(space)


def dimension_problems(name: str, spec: Any) -> list[Problem]:
    """Problems with one parameter's mapping, each at ``(name, field)``."""
    if not isinstance(spec, Mapping):
        return [Problem((name,), "must be a mapping like {type: real, low: 0.0, high: 1.0}")]
    spec = clean(spec)
    out: list[Problem] = []
    unknown = sorted(set(spec) - set(KNOWN_KEYS))
    if unknown:
        out.append(Problem((name,), f"unknown key(s) {unknown}; allowed: {sorted(KNOWN_KEYS)}"))
    kind = spec.get("type")
    if kind not in TYPES:
        return out + [Problem((name, "type"), f"{kind!r} is not a type; use real, int or "
                                              "categorical")]
    cond = spec.get("conditional")
    if cond is not None and (not isinstance(cond, Mapping) or not cond):
        out.append(Problem((name, "conditional"), "must be a mapping {parameter: value}"))
    if kind == "categorical":
        return out + _categorical(name, spec)
    return out + _numeric(name, kind, spec)


def _categorical(name: str, spec: Mapping[str, Any]) -> list[Problem]:
    out = []
    choices = spec.get("choices")
    if not isinstance(choices, (list, tuple)) or not choices:
        out.append(Problem((name, "choices"), "categorical needs a non-empty list of choices"))
    elif len({(type(c), repr(c)) for c in choices}) != len(choices):
        out.append(Problem((name, "choices"), f"{list(choices)} has repeated choices; list each "
                                              "once"))
    elif any(c is not None and not isinstance(c, (str, int, float, bool)) for c in choices):
        out.append(Problem((name, "choices"), "choices must be strings, numbers or booleans"))
    for key in ("low", "high"):
        if key in spec:
            out.append(Problem((name, key), "categorical takes `choices`, not low/high; remove "
                                            "it"))
    if spec.get("log"):
        out.append(Problem((name, "log"), "categorical has no log scale; remove it"))
    return out


def _numeric(name: str, kind: str, spec: Mapping[str, Any]) -> list[Problem]:
    out = []
    if "choices" in spec:
        out.append(Problem((name, "choices"), f"a {kind} parameter takes low/high, not choices; "
                                              "remove it"))
    missing = [k for k in ("low", "high") if k not in spec]
    if missing:
        return out + [Problem((name, missing[0]), f"a {kind} parameter needs both `low` and "
                                                  "`high`; add it")]
    bad = [(k, spec[k]) for k in ("low", "high") if not _is_number(spec[k])]
    if bad:
        return out + [Problem((name, k), f"{kind} needs a finite number (got {v!r})")
                      for k, v in bad]
    low, high = float(spec["low"]), float(spec["high"])
    if low >= high:
        out.append(Problem((name, "high"), f"empty or inverted range, low ({low}) must be < high "
                                           f"({high}); swap or widen them"))
    if spec.get("log", False) and low <= 0:
        out.append(Problem((name, "low"), f"must be > 0 for a log range (got {low}); use a "
                                          "positive low or log: false"))
    if kind == "int" and (low != int(low) or high != int(high)):
        out.append(Problem((name, "low"), f"int bounds must be whole numbers (got {low}, {high})"))
    return out


def _is_number(v: Any) -> bool:
    return not isinstance(v, bool) and isinstance(v, (int, float)) and math.isfinite(v)


def condition_problems(space: Mapping[str, Any]) -> list[Problem]:
    """Problems with the ``conditional`` entries of a space: unknown or self parents, values the
    parent cannot take, cycles. Parameters with problems of their own are left to those."""
    specs = {str(k): clean(v) for k, v in space.items()}
    valid = {k for k, v in specs.items() if not dimension_problems(k, v)}
    out: list[Problem] = []
    for name in valid:
        for parent, allowed in (specs[name].get("conditional") or {}).items():
            where = (name, "conditional", str(parent))
            if parent in specs and parent not in valid:
                continue  # the parent itself is wrong: reported already
            if parent not in specs:
                out.append(Problem(where, f"names unknown parameter {parent!r}; use one of "
                                          f"{sorted(specs)}"))
            elif parent == name:
                out.append(Problem(where, "a parameter cannot depend on itself"))
            else:
                out += [Problem(where, m) for m in _allowed_problems(parent, specs[parent], allowed)]
    if not out:
        _, cyclic = order(specs)
        if cyclic:
            out.append(Problem((), f"conditions form a cycle among {', '.join(sorted(cyclic))}; "
                                   "make one of them unconditional"))
    return out


def _allowed_problems(parent: str, spec: Mapping[str, Any], allowed: Any) -> list[str]:
    wanted = allowed if isinstance(allowed, (list, tuple)) else [allowed]
    if spec["type"] == "categorical":
        return [f"{w!r} is not a choice of {parent!r}; use one of {list(spec['choices'])}"
                for w in wanted if not any(same_choice(c, w) for c in spec["choices"])]
    return [f"{w!r} is outside {parent!r}'s range [{spec['low']}, {spec['high']}]"
            for w in wanted if not _is_number(w) or not spec["low"] <= w <= spec["high"]]


def order(space: Mapping[str, Any]) -> tuple[list[str], list[str]]:
    """The parameters ordered so that a condition's parent comes first, and those in a cycle."""
    parents = {k: set((clean(v) or {}).get("conditional") or {}) & set(space)
               for k, v in space.items()}
    placed: list[str] = []
    todo = list(space)
    while todo:
        ready = [k for k in todo if parents[k] <= set(placed)]
        if not ready:
            return placed, todo
        placed += ready
        todo = [k for k in todo if k not in ready]
    return placed, []


def same_choice(choice: Any, value: Any) -> bool:
    """``value`` is ``choice`` (True is not 1, and 1 is not True)."""
    return choice == value and isinstance(choice, bool) == isinstance(value, bool)


def active(space: Mapping[str, Any], point: Mapping[str, Any]) -> dict[str, bool]:
    """Which parameters of a (valid) space exist in ``point``: conditions applied in order."""
    is_on: dict[str, bool] = {}
    for name in order(space)[0]:
        on = True
        for parent, allowed in (clean(space[name]).get("conditional") or {}).items():
            wanted = allowed if isinstance(allowed, (list, tuple)) else [allowed]
            on = on and is_on.get(parent, False) and parent in point and any(
                same_choice(w, point[parent]) or (_is_number(w) and _is_number(point[parent])
                                                  and float(w) == float(point[parent]))
                for w in wanted)
        is_on[name] = on
    return is_on


def point_problems(space: Mapping[str, Any], point: Any, where: str = "hparams") -> list[str]:
    """Problems of a point in a (valid) space, each ``<where>.<name>: what is wrong; fix``.

    Unknown names, missing active parameters, non-numbers, non-whole ints, values outside
    ``[low, high]`` and values that are not a choice are refused; values of parameters whose
    condition does not hold are ignored (as the searchers do).
    """
    if not isinstance(point, Mapping):
        return [f"{where}: must be a mapping of parameter name -> value (got {point!r})"]
    out = [f"{where}.{k}: not in search.space (known: {sorted(space)}); remove it"
           for k in point if k not in space]
    for name, on in active(space, point).items():
        if not on:
            continue
        if name not in point:
            out.append(f"{where}.{name}: no value for {name!r}; give every active parameter of "
                       "the space")
            continue
        problem = value_problem(clean(space[name]), point[name])
        if problem:
            out.append(f"{where}.{name}: {problem}")
    return out


def value_problem(spec: Mapping[str, Any], value: Any) -> str | None:
    """What is wrong with one value of a (valid) dimension, or None."""
    kind = spec.get("type")
    if kind == "categorical":
        choices = list(spec["choices"])
        if any(same_choice(c, value) for c in choices):
            return None
        return f"{value!r} is not one of its choices {choices}; use one of them"
    if not _is_number(value):
        return f"{value!r} is not a finite number; give a number within [{spec['low']}, {spec['high']}]"
    if kind == "int" and not float(value).is_integer():
        return f"{value!r} is not a whole number; give an int"
    low, high = spec["low"], spec["high"]
    if not low <= value <= high:
        return f"{value!r} is outside [{low}, {high}]; give a value within the range"
    return None


def first_point_problem(space: Mapping[str, Any], points: Sequence[Any],
                        where: str = "point") -> str | None:
    """The first problem among ``points`` (``where[i].name: ...``), or None when all are fine."""
    for i, p in enumerate(points):
        problems = point_problems(space, p, f"{where}[{i}]")
        if problems:
            return problems[0]
    return None
