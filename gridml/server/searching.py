"""The study's own search logic, as the server uses it: /ask, should-stop, enqueue validation.

``gridml.search`` (the Searcher engineer's package) is imported lazily: the server starts, and
every other route works, without it.
"""

from __future__ import annotations

import math
from typing import Any

from gridml.errors import GridmlError, SearchError
from gridml.server.errors import PointError
from gridml.store import Study
from gridml.store.spec import Search, spec_of
from gridml.store.sql import SqlStore


def search_section(study: Study) -> Search:
    """The study's ``search`` section, typed; SearchError without a usable ``search.space``."""
    spec = spec_of(study)
    broken = [p for p in spec.problems if p.startswith(("search.space", "search:", "search "))]
    if "space" not in spec.search.model_fields_set or broken:
        raise SearchError(f"study '{study.name}' has no search.space in its spec"
                          + (f" ({broken[0]})" if broken else ""),
                          hint="create the study from a spec with a `search:` section")
    return spec.search


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
    cfg = spec_of(study).search
    rule, metric = cfg.early_stopping, cfg.objective
    if not rule or "objective" not in cfg.model_fields_set:  # a study made over the API may lack it
        return False, "no early_stopping rule in the spec"
    try:
        from gridml.search.stopping import decide
    except ImportError:
        return False, "early stopping is not available on this server"
    curves = {tid: [r.metrics.get(metric, math.nan) for r in reps]
              for tid, reps in store.study_epochs(study.id).items()}
    mine = curves.pop(trial_id, [])
    return decide(rule, mine, list(curves.values()), cfg.direction, metric=metric)


def validate_hparams(study: Study, hparams: dict[str, Any]) -> None:
    """Refuse a point outside the study's space: names, types, ranges, choices, conditions
    (the one validator, ``gridml.search.validate``, that the searchers and the spec use)."""
    from gridml.search.validate import point_problems  # lazy: see the module docstring

    search = search_section(study)
    if not search.space and search.algorithm == "external":
        return  # the external optimizer owns the space: any point (the spec left it out)
    problems = point_problems(search.space_dict(), hparams)
    if problems:
        raise PointError(problems, hint="send a point inside the study's search.space (GET "
                                        f"/api/v1/studies/{study.name} has it in spec.search)")
