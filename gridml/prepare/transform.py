"""From the user function's output to fixed arrays: x (N, F) float32, y (N,) float32, optional
weights w, ragged collections, and the deterministic split of every event.

The user function (docs/prepare.md) is ``process(events, params) -> dict`` with keys
``x`` (dict name -> array, or one (N, F) array), ``y`` (N,), optional ``w`` (N,) and optional
``selected`` (a boolean mask or indices over the chunk's events: which events the rows are).
"""

from __future__ import annotations

import importlib.util
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_modules: dict[str, Any] = {}


class ChunkProblem(Exception):
    """Something wrong with one chunk; the worker adds the file and chunk to the message."""


@dataclass
class Rows:
    """One chunk's output rows before the split."""

    columns: list[str]
    x: np.ndarray
    y: np.ndarray
    w: np.ndarray | None
    ragged: dict[str, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)  # values, lengths
    index: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # event in chunk


def load_function(path: str, name: str, version: str = "") -> Callable[..., Any]:
    """The user's function, imported once per process and ``version`` (the code hash) of it."""
    mod = _modules.get(f"{path}@{version}")
    if mod is None:
        spec = importlib.util.spec_from_file_location(f"gridml_user_prep_{len(_modules)}", path)
        assert spec is not None and spec.loader is not None
        mod = importlib.util.module_from_spec(spec)
        if str(Path(path).parent) not in sys.path:
            sys.path.insert(0, str(Path(path).parent))  # let the module import its neighbours
        spec.loader.exec_module(mod)
        _modules[f"{path}@{version}"] = mod
    return getattr(mod, name)


def call_user(fn: Callable[..., Any], events: Any, params: dict[str, Any], module: str) -> Any:
    """Call the user's function; an exception becomes a ChunkProblem naming the user's line."""
    try:
        return fn(events, dict(params))
    except Exception as exc:
        frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename == module]
        where = f"{Path(module).name}:{frames[-1].lineno} in {frames[-1].name}: " if frames else ""
        raise ChunkProblem(f"the preprocessing function raised {where}"
                           f"{type(exc).__name__}: {' '.join(str(exc).split())}") from None


def _is_jagged(arr: Any) -> bool:
    import awkward as ak

    content = ak.type(arr).content
    if isinstance(content, ak.types.OptionType):
        content = content.content
    return isinstance(content, ak.types.ListType)


def _no_missing(name: str, arr: Any) -> Any:
    """Option-typed values (e.g. from ak.max) without any None -> plain values."""
    import awkward as ak

    if not isinstance(ak.type(arr).content, ak.types.OptionType):
        return arr
    missing = int(ak.sum(ak.is_none(arr)))
    if missing:
        raise ChunkProblem(f"x.{name} is missing (None) in {missing} events; fill it "
                           "(e.g. ak.fill_none(value, 0)) or select those events out")
    return ak.fill_none(arr, 0)


def _column(name: str, arr: Any, n: int, pad: dict[str, Any]) -> tuple[list[str], np.ndarray]:
    """One named output -> (column names, (n, k) float32)."""
    if not isinstance(arr, np.ndarray):
        import awkward as ak

        arr = ak.Array(arr) if not isinstance(arr, ak.Array) else arr
        if name in pad:
            cfg = pad[name]
            arr = ak.fill_none(ak.pad_none(arr, cfg["length"], clip=True), cfg["value"])
        elif _is_jagged(arr):
            raise ChunkProblem(f"x.{name} is variable-length; give it a fixed length under "
                               f"features.pad.{name} or list it under features.ragged")
        arr = _no_missing(name, arr)
        arr = ak.to_numpy(arr)
    if arr.ndim not in (1, 2) or len(arr) != n:
        raise ChunkProblem(f"x.{name} has shape {arr.shape}; expected ({n},) or ({n}, k)")
    if arr.ndim == 1:
        return [name], arr.astype(np.float32).reshape(n, 1)
    return [f"{name}_{i}" for i in range(arr.shape[1])], arr.astype(np.float32)


def _ragged(name: str, arr: Any, n: int) -> tuple[np.ndarray, np.ndarray]:
    import awkward as ak

    arr = ak.Array(arr)
    if len(arr) != n or arr.ndim != 2:
        raise ChunkProblem(f"x.{name} (ragged) must be (N, var) with N={n}; got {ak.type(arr)}")
    lengths = ak.to_numpy(ak.num(arr, axis=1)).astype(np.int32)
    return ak.to_numpy(ak.flatten(arr)).astype(np.float32), lengths


def _vector(out: dict[str, Any], key: str, n: int) -> np.ndarray:
    arr = np.asarray(out[key], dtype=np.float32)
    if arr.shape != (n,):
        raise ChunkProblem(f"{key} has shape {arr.shape}; it must be ({n},), one value per row")
    return arr


def _selected(out: dict[str, Any], n_in: int, n_out: int) -> np.ndarray:
    sel = out.get("selected")
    if sel is None:
        if n_out != n_in:
            raise ChunkProblem(f"returned {n_out} rows for {n_in} events without `selected`; "
                               "return selected=<mask of the kept events> with a selection")
        return np.arange(n_in, dtype=np.int64)
    sel = np.asarray(sel)
    index = np.flatnonzero(sel) if sel.dtype == bool else sel.astype(np.int64)
    if sel.dtype == bool and len(sel) != n_in:
        raise ChunkProblem(f"selected is a mask of length {len(sel)}; the chunk has {n_in} events")
    if len(index) != n_out:
        raise ChunkProblem(f"selected picks {len(index)} events but y has {n_out} rows")
    return index


def to_rows(out: Any, n_in: int, pad: dict[str, Any], ragged: list[str]) -> Rows:
    """Check and convert the user function's return value."""
    if not isinstance(out, dict) or "x" not in out or "y" not in out:
        raise ChunkProblem("the preprocessing function must return a dict with keys x and y "
                           f"(got {type(out).__name__}{sorted(out) if isinstance(out, dict) else ''})")
    n = len(out["y"])
    y, w = _vector(out, "y", n), (_vector(out, "w", n) if out.get("w") is not None else None)
    xs = out["x"] if isinstance(out["x"], dict) else {"x": out["x"]}
    missing = [r for r in ragged if r not in xs] + [p for p in pad if p not in xs]
    if missing:
        raise ChunkProblem(f"features {missing} are in the spec but not returned in x")
    names: list[str] = []
    blocks = []
    for name, arr in xs.items():
        if name not in ragged:
            cols, block = _column(name, arr, n, pad)
            names += cols
            blocks.append(block)
    x = np.concatenate(blocks, axis=1) if blocks else np.zeros((n, 0), np.float32)
    _finite(x, names)
    rag = {name: _ragged(name, xs[name], n) for name in ragged}
    return Rows(names, x, y, w, rag, _selected(out, n_in, n))


def _finite(x: np.ndarray, names: list[str]) -> None:
    """NaN or inf in x would poison training: stop here, naming the columns."""
    bad = ~np.isfinite(x).all(axis=0)
    if bad.any():
        cols = [f"{names[i]} ({int((~np.isfinite(x[:, i])).sum())} rows)" for i in np.flatnonzero(bad)]
        raise ChunkProblem(f"x has NaN or inf values in {', '.join(cols[:5])}; guard the "
                           "computation (e.g. a division by zero) or select those events out")


def _mix(z: np.ndarray) -> np.ndarray:
    z = (z ^ (z >> np.uint64(30))) * _M1
    z = (z ^ (z >> np.uint64(27))) * _M2
    return z ^ (z >> np.uint64(31))


def event_hash(n: int, start: int, file_digest: str, seed: int,
               keys: list[np.ndarray]) -> np.ndarray:
    """A 64-bit hash per event: of the key columns if given, else of (file content, entry)."""
    with np.errstate(over="ignore"):
        base = np.uint64(seed & 0xFFFFFFFFFFFFFFFF) * _GOLDEN
        if not keys:
            base ^= np.uint64(int(file_digest[:16], 16))
            keys = [np.arange(start, start + n, dtype=np.int64)]
        h = np.full(n, base, dtype=np.uint64)
        for col in keys:
            h = _mix(h ^ _mix(np.asarray(col, dtype=np.int64).view(np.uint64) + _GOLDEN))
    return h


def assign(hashes: np.ndarray, fractions: list[float]) -> np.ndarray:
    """Split number of every event from its hash: deterministic, in the given proportions."""
    u = (hashes >> np.uint64(11)).astype(np.float64) / float(1 << 53)
    edges = np.cumsum(fractions)[:-1]
    return np.searchsorted(edges, u, side="right").astype(np.int8)
