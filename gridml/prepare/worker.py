"""One unit of work: an input chunk -> a cached piece (per-split arrays + a small JSON summary).

Runs in the worker processes (or in-process with -j 1). Pieces live in the cache, named by the
chunk's key (content hash of the input file, the chunk's range, the code and the config), and are
written atomically (temporary name, then rename), so a crash never leaves a half piece behind.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from gridml.prepare import readers, transform
from gridml.prepare.transform import ChunkProblem


@dataclass(frozen=True)
class ChunkTask:
    key: str
    path: str
    source: str
    kind: str
    tree: str
    branches: list[str] | None
    chunk: int
    start: int
    stop: int
    digest: str
    module: str
    code: str  # hash of the module's code: a changed module is imported again
    function: str
    params: dict[str, Any]
    pad: dict[str, Any]
    ragged: list[str]
    splits: list[str]
    fractions: list[float]
    split_key: list[str]
    seed: int
    cache: str
    sample: str = ""  # "" for a spec without samples
    label: int | None = None  # the sample's label: y of every row
    weights: bool = False  # always write w (a spec with samples)
    weight_branch: str | None = None
    feature_branches: tuple[str, ...] = ()
    collections: tuple[tuple[str, dict[str, Any]], ...] = ()  # (name, settings), spec order


def piece_paths(cache: Path, key: str) -> tuple[Path, Path]:
    """(arrays .npz, summary .json) of the piece with this key."""
    folder = cache / "pieces" / key[:2]
    return folder / f"{key}.npz", folder / f"{key}.json"


def read_summary(cache: Path, key: str) -> dict[str, Any] | None:
    """The cached summary of a piece, or None when it is not (completely) there."""
    npz, meta = piece_paths(cache, key)
    try:
        return json.loads(meta.read_text()) if npz.is_file() else None
    except (OSError, ValueError):
        return None


def _stats(x: np.ndarray) -> dict[str, Any]:
    return {"count": len(x), "sum": x.sum(axis=0, dtype=np.float64).tolist(),
            "sumsq": np.einsum("ij,ij->j", x, x, dtype=np.float64).tolist()}


def _key_column(events: Any, name: str) -> np.ndarray:
    """A split.key column: one integer per event."""
    try:
        col = np.asarray(events[name])
    except Exception:  # jagged (awkward refuses a regular numpy view)
        col = np.zeros((0, 0))
    if col.ndim != 1 or col.dtype.kind not in "iub":
        raise ChunkProblem(f"split.key column {name!r} must hold one integer per event (e.g. run, "
                           "event numbers); drop it from split.key or pick such a column")
    return col


def _split_arrays(task: ChunkTask, rows: transform.Rows, events: Any) -> tuple[dict, dict]:
    n_in = len(events)
    keys = [_key_column(events, k) for k in task.split_key]
    hashes = transform.event_hash(n_in, task.start, task.digest, task.seed, keys)
    which = transform.assign(hashes, task.fractions)[rows.index]
    arrays: dict[str, np.ndarray] = {}
    counts: dict[str, Any] = {}
    for s, name in enumerate(task.splits):
        mask = which == s
        arrays[f"{name}.x"], arrays[f"{name}.y"] = rows.x[mask], rows.y[mask]
        if rows.w is not None:
            arrays[f"{name}.w"] = rows.w[mask]
        for r, (values, lengths) in rows.ragged.items():
            arrays[f"{name}.{r}.values"] = values[np.repeat(mask, lengths)]
            arrays[f"{name}.{r}.lengths"] = lengths[mask]
        cstats = {}
        for c, parts in rows.collections.items():
            if "values" in parts:  # ragged: (M, C) values + lengths
                values = parts["values"][np.repeat(mask, parts["lengths"])]
                arrays[f"{name}.{c}.values"], real = values, values
            else:  # padded: (N, L, C) + mask + lengths
                arrays[f"{name}.{c}"] = parts[""][mask]
                arrays[f"{name}.{c}.mask"] = parts["mask"][mask]
                real = arrays[f"{name}.{c}"][arrays[f"{name}.{c}.mask"].astype(bool)]
            arrays[f"{name}.{c}.lengths"] = parts["lengths"][mask]
            cstats[c] = _stats(real)
        counts[name] = {"rows": int(mask.sum()), "stats": _stats(rows.x[mask])}
        if cstats:
            counts[name]["collections"] = cstats
    return arrays, counts


def _write(cache: Path, key: str, arrays: dict[str, np.ndarray], summary: dict[str, Any]) -> None:
    npz, meta = piece_paths(cache, key)
    npz.parent.mkdir(parents=True, exist_ok=True)
    tmp = npz.with_name(f".{key}.{os.getpid()}.npz")
    np.savez(tmp, **arrays)
    os.replace(tmp, npz)
    tmp_meta = meta.with_name(f".{key}.{os.getpid()}.json")
    tmp_meta.write_text(json.dumps(summary))
    os.replace(tmp_meta, meta)


def process(task: ChunkTask) -> dict[str, Any]:
    """Read, transform, split and cache one chunk -> its summary (or {"error": ...})."""
    where = {"source": task.source, "chunk": task.chunk, "start": task.start, "stop": task.stop}
    try:
        try:
            events = readers.read(Path(task.path), task.kind, task.tree, task.branches,
                                  task.start, task.stop)
        except Exception as exc:  # a corrupt basket, a truncated file ...
            raise ChunkProblem(f"cannot read events ({readers.one_line(exc)}); the file is "
                               "corrupt or truncated: re-create or re-download it") from None
        if task.module:
            fn = transform.load_function(task.module, task.function, task.code)
            out = transform.call_user(fn, events, task.params, task.module,
                                      sample=task.sample or None)
        else:  # no function: x, y, w and the collections come from the spec alone
            out = {"x": {}}
        rows = transform.to_rows(out, len(events), task.pad, task.ragged, events=events,
                                 label=task.label, weights=task.weights,
                                 weight_branch=task.weight_branch,
                                 branches=task.feature_branches,
                                 collections=dict(task.collections))
        arrays, splits = _split_arrays(task, rows, events)
    except ChunkProblem as exc:
        return {**where, "error": str(exc)}
    except Exception as exc:  # a bug in the user's output we did not foresee: still name the chunk
        return {**where, "error": readers.one_line(exc)}
    summary = {**where, "key": task.key, "events": len(events), "columns": rows.columns,
               "ragged": sorted(rows.ragged), "weights": rows.w is not None, "splits": splits,
               "ragged_values": {r: len(v) for r, (v, _) in rows.ragged.items()}}
    if task.sample or task.collections or task.weight_branch:  # absent for older specs
        summary.update(sample=task.sample, sumw=rows.sumw, collections={
            c: {"objects": int(p["lengths"].sum()), "channels": len(cfg["branches"]),
                "layout": cfg["layout"], "max_length": cfg.get("max_length")}
            for (c, cfg), p in zip(task.collections, rows.collections.values())})
    _write(Path(task.cache), task.key, arrays, summary)
    return summary
