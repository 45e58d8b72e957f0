"""Scaling study: the same training with 1, 2, ... Horovod ranks; throughput, speedup, efficiency.

`gridml scale spec.yaml --workers 1,2` runs one trial per rank count (fixed hyperparameters),
each as its own study ``<name>-scale-w<N>``, and writes ``scaling.json`` and ``scaling.png``
under ``$GRIDML_HOME/runs/<name>-scale/`` (also stored in the spec's output dataset).
The first epoch (graph tracing, warm-up) is left out of the throughput.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from statistics import mean
from typing import Any

from gridml import runner
from gridml.data.base import DataManager
from gridml.errors import GridmlError, UsageError
from gridml.layout import RunsLayout
from gridml.settings import settings
from gridml.spec import LoadedSpec


@dataclass
class ScalePoint:
    workers: int
    samples_per_s: float
    epoch_time: float
    input_wait_frac: float | None
    global_batch: int
    nodes: int = 1


def default_point(loaded: LoadedSpec) -> dict[str, Any]:
    """The middle of every dimension (geometric for log ranges), the first categorical choice."""
    point: dict[str, Any] = {}
    for name, dim in loaded.spec.search.space.items():
        if dim.conditional:
            continue
        if dim.type == "categorical":
            point[name] = dim.choices[0]  # type: ignore[index]
            continue
        lo, hi = float(dim.low), float(dim.high)  # type: ignore[arg-type]
        mid = (lo * hi) ** 0.5 if dim.log else (lo + hi) / 2
        point[name] = int(round(mid)) if dim.type == "int" else mid
    return point


def variant(loaded: LoadedSpec, workers: int, batch: str, nodes: int | None = None) -> LoadedSpec:
    """The spec for ``workers`` ranks: its own study, one trial, the batch kept global or per rank.
    ``nodes`` (Slurm): the ranks spread over that many nodes (study ``...-scale-wW-nN``); by
    default the spec's nodes, never more than the ranks."""
    tr = loaded.spec.training
    per_rank = tr.batch_size if batch == "per-rank" else max(tr.batch_size // workers, 1)
    name = f"{loaded.spec.name}-scale-w{workers}" + (f"-n{nodes}" if nodes else "")
    n = nodes or min(loaded.spec.resources.nodes, workers)
    spec = loaded.spec.model_copy(deep=True, update={"name": name})
    spec.training = tr.model_copy(update={"workers": workers, "batch_size": per_rank})
    spec.resources = spec.resources.model_copy(update={
        "cores": max(spec.resources.cores, -(-workers // n)), "nodes": n})
    spec.search = spec.search.model_copy(update={"max_trials": 1, "parallel": 1})
    return LoadedSpec(spec=spec, path=loaded.path, model_path=loaded.model_path)


def measure(epochs: list[Any], workers: int, per_rank_batch: int, nodes: int = 1) -> ScalePoint:
    steady = epochs[1:] or epochs
    waits = [e.input_wait_frac for e in steady if e.input_wait_frac is not None]
    return ScalePoint(workers=workers, samples_per_s=mean(e.samples_per_s or 0 for e in steady),
                      epoch_time=mean(e.epoch_time for e in steady),
                      input_wait_frac=mean(waits) if waits else None,
                      global_batch=per_rank_batch * workers, nodes=nodes)


def table(points: list[ScalePoint]) -> list[dict[str, Any]]:
    """Speedup and parallel efficiency relative to the smallest rank count."""
    base = points[0]
    rows = []
    for p in points:
        speedup = p.samples_per_s / base.samples_per_s if base.samples_per_s else 0.0
        rows.append({"workers": p.workers, "nodes": p.nodes, "samples_per_s": round(p.samples_per_s, 1),
                     "epoch_time": round(p.epoch_time, 3), "speedup": round(speedup, 3),
                     "efficiency": round(speedup * base.workers / p.workers, 3),
                     "input_wait_frac": p.input_wait_frac, "global_batch": p.global_batch})
    return rows


def plot(rows: list[dict[str, Any]], title: str, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    w = [r["workers"] for r in rows]
    fig, axes = plt.subplots(1, 3, figsize=(12, 3.6))
    axes[0].plot(w, [r["samples_per_s"] for r in rows], "o-")
    axes[0].set(xlabel="ranks", ylabel="samples/s", title="throughput")
    axes[1].plot(w, [r["speedup"] for r in rows], "o-", label="measured")
    axes[1].plot(w, [x / w[0] for x in w], "--", color="gray", label="ideal")
    axes[1].set(xlabel="ranks", ylabel="speedup", title="speedup")
    axes[1].legend()
    axes[2].plot(w, [r["efficiency"] for r in rows], "o-", label="efficiency")
    axes[2].plot(w, [r["input_wait_frac"] or 0 for r in rows], "s--", label="input-wait fraction")
    axes[2].set(xlabel="ranks", ylim=(0, 1.1), title="efficiency / input wait")
    axes[2].legend()
    fig.suptitle(title)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def parse_workers(text: str) -> list[int]:
    try:
        values = sorted({int(v) for v in text.split(",") if v.strip()})
    except ValueError:
        raise UsageError(f"--workers {text!r}: give rank counts separated by commas, e.g. 1,2,4") from None
    if not values or values[0] < 1:
        raise UsageError("--workers: rank counts must be >= 1, e.g. 1,2")
    return values


def run_scaling(loaded: LoadedSpec, data: DataManager, workers: list[int], *, batch: str = "global",
                hparams: dict[str, Any] | None = None, quiet: bool = True,
                nodes: list[int] | None = None) -> dict[str, Any]:

    point = hparams or default_point(loaded)
    points = []
    for n in workers:
        layouts: list[int | None] = list(nodes) if nodes else [None]
        for k in layouts:
            var = variant(loaded, n, batch, k)
            study, store = runner.run_local(var, data, quiet=quiet, fixed=[point])
            trial = store.list_trials(study.id)[0]
            if trial.state != "completed":
                raise GridmlError(f"scaling run with {n} ranks ended {trial.state}: {trial.error}",
                                  hint=f"see `gridml status {study.name} --trial 0`")
            points.append(measure(store.list_epochs(trial.id), n, var.spec.training.batch_size,
                                  var.spec.resources.nodes))
    rows = table(points)
    out = RunsLayout(settings().runs_dir).scaling(loaded.spec.name)
    doc = {"study": loaded.spec.name, "hparams": point, "batch": batch, "rows": rows}
    (out / "scaling.json").parent.mkdir(parents=True, exist_ok=True)
    (out / "scaling.json").write_text(json.dumps(doc, indent=2))
    png = plot(rows, f"{loaded.spec.name}: scaling over Horovod ranks ({batch} batch)", out / "scaling.png")
    try:
        data.upload([png, out / "scaling.json"], loaded.output_dataset,
                    names=[f"{loaded.spec.name}.scaling.png", f"{loaded.spec.name}.scaling.json"],
                    metadata={"study": loaded.spec.name, "kind": "scaling"})
    except GridmlError:
        pass  # the files stay under runs/; storing them is a convenience
    doc["plot"] = str(png)
    return doc
