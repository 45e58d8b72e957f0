"""A spec sent over the API (``POST /api/v1/studies``) is checked as `gridml validate` checks one.

The same model (:class:`gridml.spec.Spec`, through :func:`gridml.spec.loader.validate_model`) and
the same checks (objectives, early stopping, the searcher's options, the values bound for batch
scripts and task parameters: :mod:`gridml.fields`). What the server cannot check is left out: the
model file (it travels as ``x_model_source``) and the DIDs (the server's data backend checks them
when the campaign starts).

A spec may be partial: a study created only to collect metrics, or driven by an external
optimizer, may hold just ``search`` (and ``name``); each section given is checked, with its
defaults, as in a whole spec. A spec whose ``backend.executor`` is not ``local`` is a campaign the
server's controller will run: it must be whole. Every problem is a 422 naming its field
(``spec.search.space.lr.high: ...``); nothing a client sends can end in a 500 here.
"""

from __future__ import annotations

import logging
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from gridml import fields
from gridml.errors import GridmlError, SpecError
from gridml.server.errors import ApiError
from gridml.spec import Spec, checks
from gridml.spec.loader import validate_model

log = logging.getLogger("gridml.server")
ORIGIN = "spec"  # validate_model's "file": problems read "spec:1: field: message"
SHOWN = 8  # problems named in ``detail``


def check_spec(raw: dict[str, Any]) -> None:
    """Raise ApiError 422 naming every problem of ``raw`` (see the module docstring)."""
    try:
        problems = spec_problems(raw)
    except (GridmlError, ValueError, TypeError, KeyError, AttributeError) as exc:
        log.warning("spec check failed: %s", exc)
        problems = [f"spec: cannot be checked ({type(exc).__name__}: {str(exc)[:200]})"]
    if problems:
        more = f" (and {len(problems) - SHOWN} more)" if len(problems) > SHOWN else ""
        raise ApiError(422, "invalid spec: " + "; ".join(problems[:SHOWN]) + more,
                       hint="fix the fields named (`gridml validate` checks a spec file the "
                            "same way; `gridml schema` gives every field)")


def spec_problems(raw: dict[str, Any]) -> list[str]:
    """``spec.<field>: message`` for every problem of ``raw``; [] when it is good."""
    problems: list[str] = []
    data: dict[str, Any] = {}
    for key, value in raw.items():
        if str(key).startswith("x_"):  # x_model_source: the model file's text
            if not isinstance(value, str):
                problems.append(f"spec.{key}: must be a string")
            continue
        data[key] = value
    required = [name for name, info in Spec.model_fields.items() if info.is_required()]
    missing = [name for name in required if name not in data]
    backend = data.get("backend")
    executor = backend.get("executor", "local") if isinstance(backend, dict) else "local"
    if missing and executor != "local":
        problems.append(f"spec: a campaign for backend.executor {executor!r} needs the whole "
                        f"spec; missing {', '.join(missing)}")
    try:
        spec = validate_model(Spec, data, Path(ORIGIN), {})
    except SpecError as exc:
        for line in exc.problems:
            field = line.removeprefix(f"{ORIGIN}:1: ")
            if not any(field.startswith(f"{name}: ") and "missing" in field for name in missing):
                problems.append(f"spec.{field}")
        if problems or not missing:
            return _unique(problems)
        sections = _sections(data)  # partial, and each section given is good: check those
        found = []
        if "search" in data:
            found += checks.check_early_stopping(sections) + checks.check_search(sections)
        found += fields.spec_problems(sections)
    else:
        found = (checks.check_objective(spec) + checks.check_early_stopping(spec)
                 + checks.check_search(spec) + fields.spec_problems(spec))
    problems += [f"spec.{'.'.join(str(p) for p in loc)}: {msg}" for loc, msg in found]
    return _unique(problems)


def _sections(data: dict[str, Any]) -> Any:
    """The sections of a partial spec, validated one by one (they are known to be good)."""
    out = {}
    for name, value in data.items():
        model = Spec.model_fields[name].annotation
        if isinstance(model, type) and hasattr(model, "model_validate"):
            out[name] = model.model_validate(value)
    return SimpleNamespace(**out)


def _unique(problems: list[str]) -> list[str]:
    return list(dict.fromkeys(problems))
