"""The ``gridml prepare`` command (registered by gridml/cli.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from gridml.errors import UsageError

if TYPE_CHECKING:
    from gridml.prepare.result import PrepareResult


def prepare(
    spec: Path = typer.Argument(..., help="prepare spec (YAML), see docs/prepare.md"),
    jobs: int = typer.Option(0, "--jobs", "-j", help="worker processes (0: all cores)"),
    dataset: str | None = typer.Option(
        None, "--dataset", help="register each split's shards as the dataset SCOPE:NAME.SPLIT"),
    backend: str | None = typer.Option(
        None, "--backend", help="data backend for input DIDs and --dataset: local | rucio"),
    rehash: bool = typer.Option(False, "--rehash", help="re-hash inputs even if unchanged on disk"),
    force: bool = typer.Option(False, "--force", help="ignore the caches: recompute everything"),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="no progress bar"),
    as_json: bool = typer.Option(False, "--json", help="print the summary as JSON"),
) -> None:
    """Preprocess ROOT/HDF5 inputs into HDF5 training shards (x, y), cached and in parallel."""
    from gridml.prepare.runner import (
        run_prepare,  # lazy: numpy, awkward, uproot only when preparing
    )

    if jobs < 0:
        raise UsageError(f"--jobs {jobs}: give a number of workers >= 1, or 0 for all cores")
    res = run_prepare(spec, jobs=jobs, dataset=dataset, backend=backend, rehash=rehash,
                      force=force, show_progress=not (quiet or as_json))
    summary = summarize(res)
    typer.echo(json.dumps(summary, indent=1) if as_json else render(summary))


def summarize(res: PrepareResult) -> dict[str, Any]:
    """The stable --json summary of a run (documented in docs/prepare.md)."""
    m = res.manifest
    return {"out_dir": str(res.out_dir), "up_to_date": res.up_to_date,
            "seconds": round(res.seconds, 3), "chunks": res.chunks,
            "chunks_computed": res.chunks_computed, "events": res.events,
            "events_computed": res.events_computed, "shards_written": res.shards_written,
            "features": len(m["columns"]),
            "splits": {k: {"rows": v["rows"], "files": len(v["files"])}
                       for k, v in m["splits"].items()},
            "datasets": res.datasets,
            "timings": {k: round(v, 3) for k, v in res.timings.items()},
            **({"collections": {k: {"layout": v["layout"], "columns": v["columns"],
                                    "max_length": v["max_length"]}
                                for k, v in m["collections"].items()}}
               if m.get("collections") else {}),
            **({"samples": {k: {"label": v["label"], "rows": v.get("rows", {}),
                                "weight_scale": v["weight_scale"]}
                            for k, v in m["samples"].items()}} if m.get("samples") else {})}


def render(s: dict[str, Any]) -> str:
    """The human summary."""
    head = ("up to date: nothing changed" if s["up_to_date"] else
            f"computed {s['chunks_computed']}/{s['chunks']} chunks "
            f"({s['events_computed']:,} events), wrote {s['shards_written']} shards")
    lines = [f"{head} in {s['seconds']:.2f} s -> {s['out_dir']}",
             f"  {s['features']} features; " + ", ".join(
                 f"{k}: {v['rows']:,} rows in {v['files']} files" for k, v in s["splits"].items())]
    lines += [f"  collection {k}: {v['layout']}" + (f" to {v['max_length']}" if v["max_length"]
                                                     else "") + f", channels {v['columns']}"
              for k, v in s.get("collections", {}).items()]
    lines += [f"  sample {k}: label {v['label']}, {sum(v['rows'].values()):,} rows, weights x "
              f"{v['weight_scale']:.4g}" for k, v in s.get("samples", {}).items()]
    lines += [f"  registered {split}: {did}" for split, did in s["datasets"].items()]
    return "\n".join(lines)
