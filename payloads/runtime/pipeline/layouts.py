"""Layout records: what the start of a trial needs to know of an HDF5 input file, recorded once
when the file is registered (``gridml data put``, ``gridml prepare``'s registration), so that
the payload need not open the file at start (docs/data.md, "Many files").

A record (JSON, in the file DID's catalog metadata under ``layout``)::

    {"v": 1, "bytes": 123456,
     "datasets": {"x": {"shape": [200, 10], "dtype": "<f4", "chunks": [20, 10],
                        "direct": {"offsets": [2048, 2848, ...] | {"start": a, "step": s, "n": n},
                                   "chunk_rows": 20, "row_bytes": 40}},
                  ...}}

``direct`` is there for data that :mod:`chunkio` reads itself (whole rows per chunk; offsets
confirmed by HDF5 when the record is made), else null (HDF5 reads it). Offsets evenly spaced (a
file written in one go) are stored as start/step/count. Compressed chunks (HDF5's shuffle and
deflate filters) add ``"sizes"`` (each chunk's stored bytes, encoded as the offsets), ``"filters"``
(e.g. ``["shuffle", "deflate"]``, in HDF5's writing order) and ``"itemsize"``; a record with
such an entry is version 2 (``"v": 2``), which payloads of version 1 do not trust (they open
those files, as without a record), so an older payload never reads compressed bytes as raw.

The controller writes one sidecar per input dataset into the study's ``inputs/`` folder
(:func:`write_sidecar`, at stage-in: the local store, shared with Slurm's nodes), trial.json
names it (``data.layouts``) and the payload reads it (:func:`read_sidecars`). The payload trusts a
record only while the file's size (``os.stat``) is the recorded one; otherwise, and for files
without a record, it opens the file as before. PanDA jobs stage their inputs themselves: no
sidecar travels, their payload opens each file once.

Standard library, numpy and (to make a record) h5py only: gridml imports this module too.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

VERSION = 1
VERSIONS = (1, 2)  # what this payload reads; 2: a record with compressed direct entries
SIDECAR_FORMAT = "gridml-layouts/1"
MAX_DATASETS = 256  # a file with more datasets gets no record (opened at start as before)


# --- making a record (at registration) -----------------------------------------------------
def make_record(path: str | Path) -> dict[str, Any] | None:
    """The layout record of the HDF5 file at ``path``, or None (not HDF5, unreadable, too many
    datasets, or no h5py here): one HDF5 open."""
    try:
        import h5py
    except ImportError:
        return None
    path = Path(path)
    try:
        if not h5py.is_hdf5(path):
            return None
        size = path.stat().st_size
        with h5py.File(path, "r") as f:
            names: list[str] = []

            def visit(name: str, obj: Any) -> Any:
                if isinstance(obj, h5py.Dataset):
                    names.append(name)
                return True if len(names) > MAX_DATASETS else None

            f.visititems(visit)
            if len(names) > MAX_DATASETS:
                return None
            fd = _vfd(f)
            datasets = {n: _dataset(f[n], fd) for n in names}
    except Exception:  # a damaged file is named at the trial's start, as without a record
        return None
    filtered = any((d.get("direct") or {}).get("filters") for d in datasets.values())
    return {"v": 2 if filtered else VERSION, "bytes": size, "datasets": datasets}


def _vfd(f: Any) -> int:
    try:
        return int(f.id.get_vfd_handle())
    except Exception:
        return -1


def _dataset(d: Any, fd: int) -> dict[str, Any]:
    from payloads.runtime.pipeline.chunkio import open_direct

    dt = d.dtype
    plain = dt.fields is None and dt.subdtype is None and dt.kind in "iufb"
    rec: dict[str, Any] = {"shape": list(d.shape), "dtype": dt.str if plain else None,
                           "chunks": list(d.chunks) if d.chunks else None, "direct": None}
    if plain and fd >= 0 and d.shape:
        r = open_direct(d.file.filename, d.id, fd, verify=True)  # HDF5 confirms the offsets
        if r is not None:
            rec["direct"] = {"offsets": encode_offsets(r.offsets), "chunk_rows": int(r.chunk_rows),
                             "row_bytes": int(r.row_bytes)}
            if r.sizes is not None:
                rec["direct"].update(sizes=encode_offsets(r.sizes), filters=list(r.filters),
                                     itemsize=int(r.itemsize))
    return rec


def encode_offsets(offsets: Any) -> Any:
    """A list of ints, or {start, step, n} when evenly spaced."""
    a = np.asarray(offsets, np.int64)
    if len(a) > 2:
        steps = np.diff(a)
        if (steps == steps[0]).all():
            return {"start": int(a[0]), "step": int(steps[0]), "n": len(a)}
    return [int(v) for v in a]


def decode_offsets(enc: Any) -> np.ndarray:
    if isinstance(enc, Mapping):
        return int(enc["start"]) + int(enc["step"]) * np.arange(int(enc["n"]), dtype=np.int64)
    return np.asarray(enc, np.int64)


# --- sidecars (controller side writes, payload reads) ----------------------------------------
def sidecar_name(did: str) -> str:
    """The sidecar's file name for dataset DID ``did`` (in the study's ``inputs/`` folder)."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", did.replace(":", "__")) + ".layouts.json"


def write_sidecar(folder: Path, did: str,
                  records: Iterable[tuple[str, Mapping[str, Any] | None]]) -> Path | None:
    """Write ``folder/<sidecar_name(did)>`` with {path: record} of the files that have one
    (atomically); None (and any old sidecar removed) when none has."""
    out = Path(folder) / sidecar_name(did)
    files = {str(p): dict(r) for p, r in records if r}
    if not files:
        out.unlink(missing_ok=True)
        return None
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps({"format": SIDECAR_FORMAT, "did": did, "files": files},
                              separators=(",", ":")))
    os.replace(tmp, out)
    return out


def read_sidecars(paths: Iterable[str | Path]) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """({file path: record}, problems): the records of every readable sidecar; a missing or
    unreadable one is a problem line (the payload then opens those files, as without)."""
    records: dict[str, dict[str, Any]] = {}
    problems: list[str] = []
    for p in paths:
        try:
            doc = json.loads(Path(p).read_text())
            if doc.get("format") != SIDECAR_FORMAT:
                raise ValueError(f"format {doc.get('format')!r}, not {SIDECAR_FORMAT}")
            records.update(doc["files"])
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
            problems.append(f"{p}: {e}")
    return records, problems
