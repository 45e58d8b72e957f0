"""The study's own search logic, as the server uses it: /ask, should-stop, enqueue validation.

``gridml.search`` (the Searcher engineer's package) is imported lazily: the server starts, and
every other route works, without it.
"""

from __future__ import annotations

import math
from typing import Any

from gridml.errors import GridmlError, SearchError, SpecError
from gridml.store import Study
from gridml.store.sql import SqlStore


def search_section(study: Study) -> dict[str, Any]:
    search = study.spec.get("search")
    if not isinstance(search, dict) or not isinstance(search.get("space"), dict):
        raise SearchError(f"study '{study.name}' has no search.space in its spec",
                          hint="create the study from a spec with a `search:` section")
    return search


def ask(store: SqlStore, study: Study, n: int) -> tuple[list[dict], bool]:
    """``n`` points from the study's searcher, rebuilt from the stored observations."""
    from gridml.search import study as engine  # lazy: the searchers import skopt

    cfg = search_section(study)
    try:
        return engine.propose(cfg, store.list_trials(study.id), n, store=store)
    except GridmlError:
        raise
    except Exception as exc:  # a searcher bug or a space it cannot handle: say so, not 500
        raise SearchError(f"the searcher of study '{study.name}' failed: {exc!r}",
                          hint="check search.algorithm and search.space of the spec") from exc


def should_stop(store: SqlStore, study: Study, trial_id: int) -> tuple[bool, str]:
    """The early-stopping rule of the study applied to the stored curves."""
    cfg = study.spec.get("search") or {}
    rule, metric = cfg.get("early_stopping"), cfg.get("objective")
    if not rule or not metric:
        return False, "no early_stopping rule in the spec"
    try:
        from gridml.search.stopping import decide
    except ImportError:
        return False, "early stopping is not available on this server"
    curves = {tid: [r.metrics.get(metric, math.nan) for r in reps]
              for tid, reps in store.study_epochs(study.id).items()}
    mine = curves.pop(trial_id, [])
    return decide(rule, mine, list(curves.values()), cfg.get("direction", "minimize"),
                  metric=metric)


def validate_hparams(study: Study, hparams: dict[str, Any]) -> None:
    """Refuse a point outside the study's space: names, types, ranges, choices, conditions
    (the one validator, ``gridml.search.validate``, that the searchers and the spec use)."""
    from gridml.search.validate import point_problems  # lazy: see the module docstring

    search = search_section(study)
    if not search["space"] and search.get("algorithm") == "external":
        return  # the external optimizer owns the space: any point (the spec left it out)
    problems = point_problems(search["space"], hparams)
    if problems:
        raise SpecError(problems, hint="send a point inside the study's search.space")
