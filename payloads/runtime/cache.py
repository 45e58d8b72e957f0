"""A RAM cache of decoded blocks with a byte budget, optionally blosc2-compressed.

Epochs visit every block in a new random order, so for a data set larger than the budget no
eviction policy that ignores the future beats keeping a fixed subset: the cache fills up once
and then only serves hits (hit rate = budget / data size, no churn). When everything fits, the
second epoch on reads no file at all.

Compression (``"blosc2"``) trades CPU for room: it pays when the data would not fit otherwise
and the codec decodes faster than the file's own (gzip) filter. ``"auto"`` decides from the
first block: compress only if the raw shard would not fit the budget but the compressed one
would fit better, and blosc2 is installed.
"""

from __future__ import annotations

import threading
from typing import Any, Hashable

import numpy as np

try:  # optional dependency
    import blosc2  # type: ignore
except Exception:  # noqa: BLE001 - any import problem means "not available"
    blosc2 = None


def _pack(arr: np.ndarray) -> tuple[Any, ...]:
    buf = blosc2.compress(np.ascontiguousarray(arr), typesize=arr.dtype.itemsize, clevel=1,
                          codec=blosc2.Codec.LZ4, filter=blosc2.Filter.SHUFFLE)
    return buf, arr.dtype, arr.shape


def _unpack(packed: tuple[Any, ...]) -> np.ndarray:
    buf, dtype, shape = packed
    return np.frombuffer(blosc2.decompress(buf), dtype=dtype).reshape(shape)


class BlockCache:
    """Thread-safe ``key -> {name: array}`` store, fill-once within ``budget_bytes``."""

    def __init__(self, budget_bytes: int, compression: str = "none") -> None:
        if compression == "blosc2" and blosc2 is None:
            compression = "none"
        self.budget, self.compression = int(budget_bytes), compression
        self.used = self.hits = self.misses = 0
        self.full = False
        self._d: dict[Hashable, dict[str, Any]] = {}
        self._lock = threading.Lock()

    def get(self, key: Hashable) -> dict[str, np.ndarray] | None:
        with self._lock:
            entry = self._d.get(key)
            self.hits += entry is not None
            self.misses += entry is None
        if entry is None:
            return None
        if self.compression != "blosc2":
            return entry
        return {k: _unpack(v) for k, v in entry.items()}

    def put(self, key: Hashable, arrays: dict[str, np.ndarray]) -> bool:
        """Keep ``arrays`` if they fit in what is left of the budget; True if kept."""
        entry: dict[str, Any] = arrays
        if self.compression == "blosc2":
            entry = {k: _pack(v) for k, v in arrays.items()}
        size = sum(_nbytes(v) for v in entry.values())
        with self._lock:
            if key in self._d:
                return False
            if self.used + size > self.budget:
                self.full = True
                return False
            self._d[key] = entry
            self.used += size
        return True

    def has_room(self) -> bool:
        """Whether another block may still fit (a full cache stops copying blocks for itself)."""
        return self.budget > 0 and self.used < self.budget and not self.full

    def stats(self) -> dict[str, Any]:
        total = self.hits + self.misses
        return {"compression": self.compression, "budget_mb": round(self.budget / 2**20, 1),
                "used_mb": round(self.used / 2**20, 1), "entries": len(self._d),
                "hit_rate": round(self.hits / total, 4) if total else None}


def _nbytes(v: Any) -> int:
    return len(v[0]) if isinstance(v, tuple) else int(v.nbytes)


def choose_compression(option: str, sample: dict[str, np.ndarray], raw_total_bytes: int,
                       budget_bytes: int) -> str:
    """Resolve ``"auto"`` to ``"none"`` or ``"blosc2"`` (see the module docstring)."""
    if option != "auto":
        return option if option in ("none", "blosc2") else "none"
    if blosc2 is None or raw_total_bytes <= budget_bytes:
        return "none"
    raw = sum(v.nbytes for v in sample.values())
    packed = sum(_nbytes(_pack(v)) for v in sample.values())
    return "blosc2" if packed < 0.8 * raw else "none"
