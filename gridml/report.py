"""What `gridml status` / `gridml best` show: stable JSON documents built from the store.

The ``--json`` shapes are a public interface (documented in the README): fields may be added,
never removed or renamed.
"""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path
from statistics import mean
from typing import Any

from gridml.layout import RunsLayout
from gridml.live import progress_of
from gridml.store import ACTIVE_STATES, EpochReport, StoreReader, Study, Trial, best_trial
from gridml.store.best import feasible, pareto_front, values_of
from gridml.store.spec import Search, spec_of

INPUT_BOUND = 0.20  # input-wait fraction above which a trial is flagged input-bound


def _iso(value: Any) -> str | None:
    return value.isoformat() if value is not None else None


def _mean(values: list[float | None]) -> float | None:
    vals = [v for v in values if v is not None]
    return round(mean(vals), 6) if vals else None


def trial_summary(trial: Trial, epochs: list[EpochReport]) -> dict[str, Any]:
    wait = _mean([e.input_wait_frac for e in epochs])
    reasons = [e.extra.get("input_bound") for e in epochs if e.extra.get("input_bound")]
    return {
        "number": trial.number, "id": trial.id, "state": trial.state, "hparams": trial.hparams,
        "objective": trial.objective, "objectives": values_of(trial),
        "violations": trial.violations, "feasible": feasible(trial), "epochs_done": len(epochs),
        "time_per_epoch": _mean([e.epoch_time for e in epochs]),
        "samples_per_s": _mean([e.samples_per_s for e in epochs]),
        "input_wait_frac": wait, "input_bound": bool(wait is not None and wait > INPUT_BOUND),
        "input_bound_reason": reasons[-1] if reasons else None,
        "attempts": trial.attempts, "error": trial.error, "source": trial.source,
        "external_id": trial.external_id, "last_heartbeat": _iso(trial.last_heartbeat),
        "started": _iso(trial.started), "finished": _iso(trial.finished), "outputs": trial.outputs,
        # the one evaluation on data.test after training (None: no test split): apart from the
        # objective and the epochs, never seen by the search
        "test_metrics": _json_numbers(trial.test_metrics),
    }


def _json_numbers(values: dict[str, float | None] | None) -> dict[str, float | None] | None:
    """Non-finite numbers as None (strict JSON, as the API sends them)."""
    if values is None:
        return None
    return {k: v if v is None or math.isfinite(v) else None for k, v in values.items()}


def test_line(summary: dict[str, Any]) -> str | None:
    """One line of a trial's test-split figures (``gridml status``/``best``), None without."""
    values = summary.get("test_metrics")
    if not values:
        return None
    shown = ", ".join(f"{k} = {'-' if v is None else format(v, '.5g')}"
                      for k, v in sorted(values.items()))
    return f"test split (evaluated once after training, never seen by the search): {shown}"


def epoch_rows(epochs: list[EpochReport]) -> list[dict[str, Any]]:
    return [e.to_json() for e in epochs]


def _importance(search: Search, trials: list[Trial], cache: Path) -> dict[str, float]:
    """{parameter: share} of the objective's variance (fANOVA, gridml.search.importance)."""
    from gridml.search.importance import importance

    return importance(search, trials, cache=cache)


def study_document(store: StoreReader, study: Study, runs_dir: Path,
                   importance: bool = True) -> dict[str, Any]:
    """The study, its best trial, Pareto front and every trial's summary (``gridml status
    --json``); ``importance``: with the parameters' fANOVA shares (else ``{}``)."""
    trials = store.list_trials(study.id)
    summaries = [trial_summary(t, store.list_epochs(t.id)) for t in trials]
    paths = RunsLayout(runs_dir).study(study.name)
    for t, s in zip(trials, summaries):  # where a running trial is (its progress.json)
        s["progress"] = progress_of(paths.trial(t.number)) if t.state in ACTIVE_STATES else None
    best = best_trial(study, trials)  # (gridml.store.best: the one rule)
    front = {t.id for t in pareto_front(study, trials)}
    plot = runs_dir / study.name / "convergence.png"
    spec = spec_of(study)
    search = spec.search
    return {
        "study": {
            "id": study.id, "name": study.name, "state": study.state,
            "objective": search.objective, "direction": search.direction,
            "max_trials": search.max_trials, "n_trials": len(trials),
            "counts": dict(Counter(t.state for t in trials)),
            "best": next((s for s in summaries if best and s["id"] == best.id), None),
            "output_dataset": spec.output.dataset,
            "convergence_plot": str(plot) if plot.exists() else None,
            "importance": _importance(search, trials, paths.importance) if importance else {},
            "objectives": [{"metric": m, "direction": d} for m, d in search.goals()],
            "constraints": list(search.constraints),
            "pareto": [s for s in summaries if s["id"] in front],  # by trial number
        },
        "trials": summaries,
    }
