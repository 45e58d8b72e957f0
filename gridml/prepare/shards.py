"""Shards: the cached pieces of each input file, per split, cut into HDF5 files of a target size.

A shard never spans two input files, so a change to one input rewrites only that file's shards.
Each shard has an identity (hash of the piece slices it holds and of the output settings): a shard
whose identity did not change is not written again. Layout of one shard (docs/prepare.md)::

    x (N, F) float32   columns in x.attrs["columns"]      y (N,) float32     [w (N,) float32]
    <name>_values (M,) float32, <name>_lengths (N,) int32  for each ragged feature
    for each collection <c> with C channels (names in the dataset's attrs["columns"]):
      padded: <c> (N, L, C) float32, <c>_mask (N, L) uint8, <c>_lengths (N,) int32
      ragged: <c>_values (M, C) float32, <c>_lengths (N,) int32
    root attrs: split, source, spec, code_hash, config_hash, normalized
                (and norm_mean, norm_std when normalize: apply; otherwise they are in norm.json)
                with samples: sample, label, weight_scale; with collections/classes: their JSON
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from gridml.data.base import adler32_file
from gridml.prepare.worker import piece_paths

CHUNK_BYTES = 1 << 20  # HDF5 chunk of x: about 1 MiB, read whole by the payload's loader


@dataclass
class ShardPlan:
    name: str
    split: str
    source: str
    rows: int
    members: list[tuple[str, int, int]]  # (piece key, first row, end row) within the piece
    identity: str = ""
    attrs: dict[str, Any] = field(default_factory=dict)
    file: int = 0  # index of the input file it comes from


def norm_constants(summaries: list[dict[str, Any]], split: str, width: int) -> dict[str, Any]:
    """Mean and standard deviation of every x column over ``split`` (float64 sums, merged)."""
    n, s, ss = 0, np.zeros(width), np.zeros(width)
    for summ in summaries:
        st = summ["splits"][split]["stats"]
        n, s, ss = n + st["count"], s + np.asarray(st["sum"] or np.zeros(width)), ss + np.asarray(
            st["sumsq"] or np.zeros(width))
    mean = s / max(n, 1)
    std = np.sqrt(np.maximum(ss / max(n, 1) - mean**2, 0.0))
    return {"split": split, "count": n, "mean": mean.tolist(), "std": std.tolist()}


def collection_norm(summaries: list[dict[str, Any]], split: str,
                    info: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Mean and standard deviation of every collection channel over the real objects of
    ``split`` (padding left out)."""
    out = {}
    for c, cinfo in info.items():
        width = len(cinfo["columns"])
        n, s, ss = 0, np.zeros(width), np.zeros(width)
        for summ in summaries:
            st = summ["splits"][split].get("collections", {}).get(c)
            if st and st["count"]:
                n, s, ss = n + st["count"], s + np.asarray(st["sum"]), ss + np.asarray(st["sumsq"])
        mean = s / max(n, 1)
        std = np.sqrt(np.maximum(ss / max(n, 1) - mean**2, 0.0))
        out[c] = {"columns": cinfo["columns"], "count": n, "mean": mean.tolist(),
                  "std": std.tolist()}
    return out


def _stem(source: str) -> str:
    name = source.rsplit(":", 1)[-1].rsplit("/", 1)[-1]
    name = re.sub(r"\.(root|h5|hdf5|hdf)$", "", name, flags=re.IGNORECASE)
    return re.sub(r"[^A-Za-z0-9._+-]", "_", name)[:120] or "input"


def _stems(sources: list[str]) -> list[str]:
    stems = [_stem(s) for s in sources]
    dups = {s for s in stems if stems.count(s) > 1}
    return [f"{s}.{i:04d}" if s in dups else s for i, s in enumerate(stems)]


def row_bytes(summary: dict[str, Any], split: str) -> float:
    """Bytes of one row of ``split`` in a piece (x, y, w and the ragged values on average)."""
    rows = max(summary["splits"][split]["rows"], 1)
    ragged = sum(4 * v / rows + 4 for v in summary["ragged_values"].values())
    for c in summary.get("collections", {}).values():
        if c["layout"] == "padded":
            ragged += c["max_length"] * (4 * c["channels"] + 1) + 4
        else:
            ragged += 4 * c["channels"] * c["objects"] / max(summary["events"], 1) + 4
    return 4 * len(summary["columns"]) + 4 + (4 if summary["weights"] else 0) + ragged


def plan(summaries_by_file: list[list[dict[str, Any]]], sources: list[str], splits: list[str],
         shard_size: int, samples: list[str] | None = None) -> list[ShardPlan]:
    """Cut every (input file, split) into shards of about ``shard_size`` bytes (named
    ``<split>-[<sample>.]<file>-NNN.h5``)."""
    plans = []
    if samples and any(samples):
        stems = _stems([f"{smp}.{_stem(src)}" for smp, src in zip(samples, sources)])
    else:
        stems = _stems(sources)
    for file, (stem, source, summaries) in enumerate(zip(stems, sources, summaries_by_file)):
        for split in splits:
            pieces = [(s["key"], s["splits"][split]["rows"]) for s in summaries]
            total = sum(r for _, r in pieces)
            if total == 0:
                continue
            width = max(row_bytes(s, split) for s in summaries)
            per = max(1, int(shard_size // width))
            for j, lo in enumerate(range(0, total, per)):
                members = _slice(pieces, lo, min(lo + per, total))
                plans.append(ShardPlan(f"{split}-{stem}-{j:03d}.h5", split, source,
                                       sum(b - a for _, a, b in members), members, file=file))
    return plans


def _slice(pieces: list[tuple[str, int]], lo: int, hi: int) -> list[tuple[str, int, int]]:
    """Rows [lo, hi) of the concatenated pieces as (key, first, end) within each piece."""
    out, offset = [], 0
    for key, rows in pieces:
        a, b = max(lo - offset, 0), min(hi - offset, rows)
        if a < b:
            out.append((key, a, b))
        offset += rows
    return out


def identify(plans: list[ShardPlan], settings: dict[str, Any]) -> None:
    """Give every plan its identity: what it holds and how it is written."""
    for p in plans:
        blob = json.dumps([p.name, p.members, settings, p.attrs], sort_keys=True, default=str)
        p.identity = hashlib.sha256(blob.encode()).hexdigest()[:24]


def _load(cache: Path, members: list[tuple[str, int, int]], split: str) -> dict[str, np.ndarray]:
    """Concatenate the member slices of one split (x, y, w, ragged) from the cached pieces."""
    parts: dict[str, list[np.ndarray]] = {}
    for key, a, b in members:
        with np.load(piece_paths(cache, key)[0]) as npz:
            for name in npz.files:
                if not name.startswith(f"{split}."):
                    continue
                arr, field_ = npz[name], name[len(split) + 1:]
                if field_.endswith(".values"):
                    lengths = npz[name[: -len("values")] + "lengths"]
                    off = np.concatenate([[0], np.cumsum(lengths, dtype=np.int64)])
                    arr = arr[off[a]:off[b]]
                else:
                    arr = arr[a:b]
                parts.setdefault(field_, []).append(arr)
    return {k: np.concatenate(v) for k, v in parts.items()}


def write(task: dict[str, Any]) -> dict[str, Any]:
    """Write one shard to ``task['tmp']`` (the runner renames it into place) -> its size, adler32."""
    import h5py

    data = _load(Path(task["cache"]), task["members"], task["split"])
    x = data.pop("x")
    norm = task["norm"]
    if task["normalize"] == "apply":
        std = np.asarray(norm["std"])
        x = ((x - np.asarray(norm["mean"])) / np.where(std > 0, std, 1.0)).astype(np.float32)
    comp = {"gzip": {"compression": "gzip", "compression_opts": task["level"], "shuffle": True},
            "lzf": {"compression": "lzf", "shuffle": True}, "none": {}}[task["compression"]]
    scale = task["attrs"].get("weight_scale", 1.0)
    if "w" in data and scale != 1.0:  # the sample's xsec * lumi / sum of weights, and scale
        data["w"] = (data["w"].astype(np.float64) * scale).astype(np.float32)
    rows = max(1, min(len(x), CHUNK_BYTES // max(4 * x.shape[1], 1)))
    collections = task.get("collections") or {}
    with h5py.File(task["tmp"], "w") as fh:
        dx = fh.create_dataset("x", data=x, chunks=(rows, max(x.shape[1], 1)) if x.size else None,
                               **(comp if x.size else {}))
        dx.attrs["columns"] = task["columns"]
        for name, arr in data.items():
            row = max(arr[:1].nbytes, 1)  # 1-D float32: 2**18 rows, as always
            fh.create_dataset(name.replace(".", "_"), data=arr,
                              chunks=(max(1, min(len(arr), CHUNK_BYTES // row)), *arr.shape[1:])
                              if arr.size else None, **(comp if arr.size else {}))
        for c, info in collections.items():
            main = fh[c] if info["layout"] == "padded" else fh[f"{c}_values"]
            main.attrs["columns"] = info["columns"]
            for k in ("layout", "sort_by", "max_length", "pad_value"):
                if info.get(k) is not None:
                    main.attrs[k] = info[k]
        if collections:
            fh.attrs["collections"] = json.dumps(collections)
        for k, v in task["attrs"].items():
            fh.attrs[k] = v
        fh.attrs["normalized"] = task["normalize"] == "apply"
        if task["normalize"] == "apply":  # what was subtracted and divided by (else: norm.json)
            fh.attrs["norm_mean"] = np.asarray(norm["mean"], np.float32)
            fh.attrs["norm_std"] = np.asarray(norm["std"], np.float32)
    return {"name": task["name"], "bytes": os.path.getsize(task["tmp"]),
            "adler32": adler32_file(Path(task["tmp"])), "rows": len(x)}
