"""From the user function's output to fixed arrays: x (N, F) float32, y (N,) float32, optional
weights w, ragged features, collections, and the deterministic split of every event.

The user function (docs/prepare.md) is ``process(events, params) -> dict`` with keys
``x`` (dict name -> array, or one (N, F) array), ``y`` (N,), optional ``w`` (N,) and optional
``selected`` (a boolean mask or indices over the chunk's events: which events the rows are).
It may take a keyword ``sample`` (or ``**kwargs``): then it is told the sample's name.

What the spec asks of the events themselves is added to it here: ``features.branches`` (x
columns), the sample's label (y), its generator weights (w) and the collections (per-object
branches sorted, truncated and stacked into one array with a trailing channel axis).
"""

from __future__ import annotations

import importlib.util
import inspect
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
    # collection name -> {"values" (M, C), "lengths" (N,)} (ragged) or
    # {"" (N, L, C), "mask" (N, L) uint8, "lengths" (N,)} (padded)
    collections: dict[str, dict[str, np.ndarray]] = field(default_factory=dict)
    sumw: float = 0.0  # sum of the generator weights of all the chunk's events (before selection)


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


def takes_sample(fn: Callable[..., Any]) -> bool:
    """True when ``fn`` accepts a keyword ``sample`` (named, or through ``**kwargs``)."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return False
    return any((p.name == "sample" and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY))
               or p.kind == p.VAR_KEYWORD for p in params)


def call_user(fn: Callable[..., Any], events: Any, params: dict[str, Any], module: str,
              sample: str | None = None) -> Any:
    """Call the user's function (with ``sample=`` when it takes it and a sample is named); an
    exception becomes a ChunkProblem naming the user's line."""
    try:
        if sample is not None and takes_sample(fn):
            return fn(events, dict(params), sample=sample)
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


def _is_list(arr: Any) -> bool:
    """A list per event, of variable (jagged) or fixed (regular) length."""
    import awkward as ak

    content = ak.type(arr).content
    if isinstance(content, ak.types.OptionType):
        content = content.content
    return isinstance(content, (ak.types.ListType, ak.types.RegularType))


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


def _selected(out: dict[str, Any], n_in: int, n_out: int | None) -> np.ndarray:
    """The chunk's event of every row (``n_out`` None: as many rows as selected)."""
    sel = out.get("selected")
    if sel is None:
        if n_out is not None and n_out != n_in:
            raise ChunkProblem(f"returned {n_out} rows for {n_in} events without `selected`; "
                               "return selected=<mask of the kept events> with a selection")
        return np.arange(n_in, dtype=np.int64)
    sel = np.asarray(sel)
    index = np.flatnonzero(sel) if sel.dtype == bool else sel.astype(np.int64)
    if sel.dtype == bool and len(sel) != n_in:
        raise ChunkProblem(f"selected is a mask of length {len(sel)}; the chunk has {n_in} events")
    if n_out is not None and len(index) != n_out:
        raise ChunkProblem(f"selected picks {len(index)} events but y has {n_out} rows")
    return index


def to_rows(out: Any, n_in: int, pad: dict[str, Any], ragged: list[str], *,
            events: Any = None, label: int | None = None, weights: bool = False,
            weight_branch: str | None = None, branches: list[str] | tuple[str, ...] = (),
            collections: dict[str, dict[str, Any]] | None = None) -> Rows:
    """Check and convert the user function's return value (``out``), completed from ``events``
    with what the spec asks: ``branches`` as x columns, ``label`` as y, the weights (always
    written when ``weights``; times ``weight_branch``) and the ``collections``."""
    if not isinstance(out, dict) or (label is None and ("x" not in out or "y" not in out)):
        raise ChunkProblem("the preprocessing function must return a dict with keys x and y "
                           f"(got {type(out).__name__}{sorted(out) if isinstance(out, dict) else ''})")
    if label is None:
        n = len(out["y"])
        y = _vector(out, "y", n)
        index = None
    else:
        if out.get("y") is not None:
            raise ChunkProblem("returned y, but the sample has a label (y = the label); drop y "
                               "from the return value or the label from the sample")
        index = _selected(out, n_in, None)
        n = len(index)
        y = np.full(n, label, dtype=np.float32)
    w = _vector(out, "w", n) if out.get("w") is not None else None
    xs = out.get("x", {})  # with a label, x may be left out (a collection alone)
    xs = xs if isinstance(xs, dict) else {"x": xs}
    missing = [r for r in ragged if r not in xs] + [p for p in pad if p not in xs]
    if missing:
        raise ChunkProblem(f"features {missing} are in the spec but not returned in x")
    both = sorted(set(branches) & set(xs))
    if both:
        raise ChunkProblem(f"x.{both[0]} is returned by the function and listed under "
                           "features.branches; keep one")
    names: list[str] = []
    blocks = []
    for name, arr in xs.items():
        if name not in ragged:
            cols, block = _column(name, arr, n, pad)
            names += cols
            blocks.append(block)
    rag = {name: _ragged(name, xs[name], n) for name in ragged}
    if index is None:
        index = _selected(out, n_in, n)
    needs_events = bool(branches or weight_branch or collections)
    if needs_events and events is None:
        raise ChunkProblem("the spec reads branches from the events, but none were given")
    picked = _Picked(events, index, n_in) if needs_events else None
    for name in reversed(branches):  # the spec's branches first, in their order
        assert picked is not None
        arr = picked(name, "features.branches")
        if not isinstance(arr, np.ndarray) and _is_jagged(arr):
            raise ChunkProblem(f"features.branches: {name!r} holds a list per event; put it in "
                               "a collection (collections: in the spec) or pad it in the function")
        cols, block = _column(name, arr, n, {})
        names = cols + names
        blocks.insert(0, block)
    x = np.concatenate(blocks, axis=1) if blocks else np.zeros((n, 0), np.float32)
    _finite(x, names)
    sumw = float(n_in)
    if weight_branch:
        assert picked is not None
        gen_all = _event_vector(picked.all(weight_branch), weight_branch, n_in)
        sumw = float(gen_all.sum(dtype=np.float64))
        gen = gen_all[index]
        w = gen if w is None else (w * gen).astype(np.float32)
    if w is None and weights:
        w = np.ones(n, dtype=np.float32)
    if w is not None:
        _finite(w.reshape(n, 1), ["w"])
    given = out.get("collections") or {}
    unknown = sorted(set(given) - set(collections or {}))
    if unknown:
        raise ChunkProblem(f"returned collections {unknown} that the spec does not list under "
                           "collections")
    colls = {}
    for cname, cfg in (collections or {}).items():
        assert picked is not None
        colls[cname] = collection(cname, cfg, _Given(given.get(cname), picked, n, cname), n)
    return Rows(names, x, y, w, rag, index, colls, sumw)


class _Given:
    """A collection's branches: those the function returned under ``collections.<name>`` (a
    dict or a record array, one row per output row), else the selected events' branches."""

    def __init__(self, given: Any, picked: _Picked, n: int, name: str) -> None:
        if given is not None and not isinstance(given, dict):
            import awkward as ak

            arr = ak.Array(given)
            if not arr.fields:
                raise ChunkProblem(f"collections.{name} returned by the function must be a dict "
                                   "of per-object arrays (or a record array, e.g. ak.zip)")
            given = {f: arr[f] for f in arr.fields}
        self.given, self.picked, self.n, self.name = given or {}, picked, n, name

    def __call__(self, branch: str, where: str) -> Any:
        if branch in self.given:
            arr = self.given[branch]
            if len(arr) != self.n:
                raise ChunkProblem(f"collections.{self.name}.{branch} returned with {len(arr)} "
                                   f"rows; it must have one per output row ({self.n})")
            return arr
        return self.picked(branch, f"{where} (nor returned by the function)")


class _Picked:
    """Branches of the selected events, read lazily; a missing branch is a ChunkProblem."""

    def __init__(self, events: Any, index: np.ndarray, n_in: int) -> None:
        self.events, self.index, self.n_in = events, index, n_in
        self.fields = set(getattr(events, "fields", []) or [])
        self.everything = len(index) == n_in and bool(np.all(index == np.arange(n_in)))

    def all(self, name: str, what: str = "a branch") -> Any:
        if name not in self.fields:
            raise ChunkProblem(f"{what}: branch {name!r} not in the input (it has "
                               f"{sorted(self.fields)[:40]})")
        return self.events[name]

    def __call__(self, name: str, what: str = "a branch") -> Any:
        arr = self.all(name, what)
        return arr if self.everything else arr[self.index]


def _event_vector(arr: Any, name: str, n: int) -> np.ndarray:
    try:
        out = np.asarray(arr, dtype=np.float64)
    except (ValueError, TypeError):
        out = np.zeros((0, 0))
    if out.shape != (n,):
        raise ChunkProblem(f"weight_branch {name!r} must hold one number per event")
    return out


def collection(name: str, cfg: dict[str, Any], picked: Any, n: int) -> dict[str, np.ndarray]:
    """One collection of the selected events: its branches (jagged, the same objects) sorted by
    ``sort_by`` (descending, stable), cut at ``max_length``, stacked on a last channel axis."""
    import awkward as ak

    where = f"collections.{name}"
    arrays = [ak.Array(picked(b, where)) for b in cfg["branches"]]
    key = ak.Array(picked(cfg["sort_by"], where)) if cfg.get("sort_by") else None
    counts = None
    for b, arr in zip([*cfg["branches"], cfg.get("sort_by")], [*arrays, key]):
        if arr is None:
            continue
        if arr.ndim != 2 or not _is_list(arr):
            raise ChunkProblem(f"{where}: branch {b!r} is {ak.type(arr)}, not one list of numbers "
                               "per event; a collection takes per-object (jagged) branches")
        num = ak.to_numpy(ak.num(arr, axis=1))
        if counts is None:
            counts, first = num, b
        elif not np.array_equal(num, counts):
            bad = int((num != counts).sum())
            raise ChunkProblem(f"{where}: branches {first!r} and {b!r} have different numbers of "
                               f"objects in {bad} of {len(num)} events; a collection's branches "
                               "must describe the same objects")
    arrays = [ak.fill_none(a, cfg["pad_value"]) for a in arrays]
    if key is not None:
        order = ak.argsort(ak.fill_none(key, -np.inf), axis=1, ascending=False, stable=True)
        arrays = [a[order] for a in arrays]
    if cfg.get("max_length"):
        arrays = [a[:, : cfg["max_length"]] for a in arrays]
    lengths = ak.to_numpy(ak.num(arrays[0], axis=1)).astype(np.int32) if n else np.zeros(0, np.int32)
    if cfg["layout"] == "ragged":
        cols = [ak.to_numpy(ak.flatten(a)).astype(np.float32) for a in arrays]
        values = np.stack(cols, axis=1) if cols[0].size else np.zeros((0, len(cols)), np.float32)
        _finite_values(where, values, cfg["branches"])
        return {"values": values, "lengths": lengths}
    length = cfg["max_length"]
    cols = [ak.to_numpy(ak.fill_none(ak.pad_none(a, length, clip=True), cfg["pad_value"]))
            .astype(np.float32).reshape(n, length) for a in arrays]
    padded = np.stack(cols, axis=-1)
    mask = (np.arange(length)[None, :] < lengths[:, None]).astype(np.uint8)
    _finite_values(where, padded.reshape(-1, len(cols)), cfg["branches"])
    return {"": padded, "mask": mask, "lengths": lengths}


def _finite_values(where: str, values: np.ndarray, names: list[str]) -> None:
    bad = ~np.isfinite(values).all(axis=0)
    if bad.any():
        raise ChunkProblem(f"{where}: NaN or inf in {[names[i] for i in np.flatnonzero(bad)]}; "
                           "select those objects or events out")


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
