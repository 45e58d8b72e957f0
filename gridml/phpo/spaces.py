"""Search spaces as iDDS hands them over: gridml's format, or hpogrid's, converted to gridml's.

hpogrid (``hpogrid.search_space.base_space.BaseSpace``) writes
``{"lr": {"method": "loguniform", "dimension": {"low": 1e-4, "high": 0.1, "base": 10}}, ...}``
with the methods ``categorical`` (``categories``, ``grid_search``), ``uniform``, ``uniformint``,
``loguniform`` (``base``), ``loguniformint`` (skopt), ``fixed`` (``value``), ``quniform``,
``qloguniform``, ``normal``, ``qnormal``, ``lognormal`` and ``qlognormal``. The first six have a
gridml equivalent (real / int / categorical, ``log: true``); the quantised and normal ones do
not and are refused with the name of the parameter. The result goes through gridml's one space
validator (:func:`gridml.search.validate_space`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gridml.search import validate_space

GRIDML_KEYS = ("type",)
UNSUPPORTED = ("quniform", "qloguniform", "normal", "qnormal", "lognormal", "qlognormal")


class SpaceProblem(ValueError):
    """A space that cannot be used: the message names the field."""


def space_format(space: Any) -> str:
    """``gridml`` or ``hpogrid`` (raises SpaceProblem when it is neither, or both mixed)."""
    if not isinstance(space, Mapping) or not space:
        raise SpaceProblem("must be a non-empty mapping of parameter name -> definition")
    kinds = set()
    for name, dim in space.items():
        if isinstance(dim, Mapping) and "method" in dim:
            kinds.add("hpogrid")
        elif isinstance(dim, Mapping) and "type" in dim:
            kinds.add("gridml")
        else:
            raise SpaceProblem(f"{name}: neither gridml's {{type: real|int|categorical, ...}} nor "
                               "hpogrid's {method: ..., dimension: {...}}")
    if len(kinds) > 1:
        raise SpaceProblem("mixes gridml's (type: ...) and hpogrid's (method: ...) formats; "
                           "use one of them for every parameter")
    return kinds.pop()


def from_hpogrid(space: Mapping[str, Any]) -> dict[str, Any]:
    """hpogrid's space as gridml's ``search.space`` (not yet validated)."""
    out: dict[str, Any] = {}
    for name, dim in space.items():
        method = dim.get("method")
        d = dim.get("dimension") or {}
        if not isinstance(d, Mapping):
            raise SpaceProblem(f"{name}.dimension: must be a mapping")
        if method in UNSUPPORTED:
            raise SpaceProblem(f"{name}.method: {method!r} has no gridml equivalent; use uniform, "
                               "uniformint, loguniform, loguniformint, categorical or fixed")
        try:
            if method == "categorical":
                if d.get("grid_search"):
                    raise SpaceProblem(f"{name}.dimension.grid_search: not supported; use "
                                       "--algorithm grid for a grid search")
                out[name] = {"type": "categorical", "choices": list(d["categories"])}
            elif method == "fixed":
                out[name] = {"type": "categorical", "choices": [d["value"]]}
            elif method in ("uniform", "loguniform"):
                out[name] = {"type": "real", "low": d["low"], "high": d["high"]}
            elif method in ("uniformint", "loguniformint"):
                out[name] = {"type": "int", "low": d["low"], "high": d["high"]}
            else:
                raise SpaceProblem(f"{name}.method: {method!r} is not an hpogrid method")
        except KeyError as exc:
            raise SpaceProblem(f"{name}.dimension: {method} needs {exc.args[0]!r}") from None
        if method in ("loguniform", "loguniformint"):
            out[name]["log"] = True
    return out


def to_gridml(space: Any) -> dict[str, Any]:
    """A valid gridml space from either format; SpaceProblem names what is wrong."""
    converted = from_hpogrid(space) if space_format(space) == "hpogrid" else dict(space)
    problems = validate_space(converted)
    if problems:
        raise SpaceProblem(problems[0].removeprefix("search.space").lstrip(".")
                           + (f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""))
    return converted
