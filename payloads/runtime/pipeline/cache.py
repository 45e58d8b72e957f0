"""A RAM cache of decoded blocks with a byte budget, clairvoyant, optionally blosc2-compressed.

Every block is read once per epoch, in an order the seed fixes, so the loader knows when each
block will be needed next (its *next use*: a position in this rank's stream over this epoch and
the next one). The cache keeps the blocks needed soonest (Belady's rule, possible here because
the future is known, as in NoPFS): when it is full, a block is admitted only if it will be
needed before the cached block needed last, which is then evicted.

With one rank that is no better than filling the cache once and keeping it (every block comes
back exactly once per epoch: hits per epoch can never exceed the blocks held). With several
ranks it matters: each epoch deals every rank a different random half (third...) of the blocks,
and keeping the ones this rank gets again next epoch doubles the hit rate at small budgets
(tests/unit/test_input_plan.py measures it). ``policy="static"`` (fill once) is kept for
comparison. When everything fits, the second epoch on reads no file at all.

Compression (``"blosc2"``) trades CPU for room: it pays when the data would not fit otherwise
and the codec decodes faster than the file's own (gzip) filter. ``"auto"`` decides from the
first block: compress only if the data would not fit the budget raw and blosc2 shrinks the
block below 80%, and blosc2 is installed.
"""

from __future__ import annotations

import heapq
import functools
import math
import threading
from typing import Any
from collections.abc import Hashable

import numpy as np

NEVER = math.inf  # next use beyond what the loader can see


@functools.cache
def _blosc2() -> Any:
    """blosc2 (optional), imported the first time compression is considered: most runs fit the
    budget raw, and its import (~0.3 s of CPU) would be paid by every rank."""
    try:
        import blosc2  # type: ignore
    except Exception:
        return None
    return blosc2


def _pack(arr: np.ndarray) -> tuple[Any, ...]:
    blosc2 = _blosc2()
    buf = blosc2.compress(np.ascontiguousarray(arr), typesize=arr.dtype.itemsize, clevel=1,
                          codec=blosc2.Codec.LZ4, filter=blosc2.Filter.SHUFFLE)
    return buf, arr.dtype, arr.shape


def _unpack(packed: tuple[Any, ...]) -> np.ndarray:
    buf, dtype, shape = packed
    return np.frombuffer(_blosc2().decompress(buf), dtype=dtype).reshape(shape)


def _nbytes(v: Any) -> int:
    return len(v[0]) if isinstance(v, tuple) else int(v.nbytes)


class BlockCache:
    """Thread-safe ``key -> {name: array}`` store within ``budget_bytes``.

    ``next_use`` (smaller: needed sooner) comes with every ``get``/``put``; the cache keeps a
    lazy max-heap of the cached keys by next use to find the one needed last.
    """

    def __init__(self, budget_bytes: int, compression: str = "none",
                 policy: str = "clairvoyant") -> None:
        if compression == "blosc2" and _blosc2() is None:
            compression = "none"
        self.budget, self.compression, self.policy = int(budget_bytes), compression, policy
        self.used = self.hits = self.misses = self.evictions = 0
        self._d: dict[Hashable, dict[str, Any]] = {}
        self._size: dict[Hashable, int] = {}
        self._next: dict[Hashable, float] = {}
        self._heap: list[tuple[float, int, Hashable]] = []  # (-next use, tie, key), lazy
        self._tie = 0
        self._lock = threading.Lock()

    def _mark(self, key: Hashable, next_use: float) -> None:
        self._next[key] = next_use
        self._tie += 1
        heapq.heappush(self._heap, (-next_use, self._tie, key))
        if len(self._heap) > 4 * len(self._d) + 64:  # drop stale entries now and then
            self._heap = [(-n, i, k) for i, (k, n) in enumerate(self._next.items())]
            heapq.heapify(self._heap)

    def get(self, key: Hashable, next_use: float = NEVER) -> dict[str, np.ndarray] | None:
        with self._lock:
            entry = self._d.get(key)
            self.hits += entry is not None
            self.misses += entry is None
            if entry is not None:
                self._mark(key, next_use)
        if entry is None or self.compression != "blosc2":
            return entry
        return {k: _unpack(v) for k, v in entry.items()}

    def _farthest(self) -> tuple[float, Hashable] | None:
        """The cached key needed last (stale heap entries dropped on the way)."""
        while self._heap:
            neg, _, key = self._heap[0]
            if key in self._d and self._next.get(key) == -neg:
                return -neg, key
            heapq.heappop(self._heap)
        return None

    def wants(self, next_use: float, size_hint: int = 0) -> bool:
        """Whether a block needed at ``next_use`` would be kept (read it whole, then ``put``)."""
        with self._lock:
            if self.budget <= 0:
                return False
            if self.used + size_hint <= self.budget:
                return True
            far = self._farthest() if self.policy == "clairvoyant" else None
            return far is not None and far[0] > next_use

    def put(self, key: Hashable, arrays: dict[str, np.ndarray], next_use: float = NEVER) -> bool:
        """Keep ``arrays``, evicting blocks needed later than ``next_use``; True if kept."""
        entry: dict[str, Any] = arrays
        if self.compression == "blosc2":
            entry = {k: _pack(v) for k, v in arrays.items()}
        size = sum(_nbytes(v) for v in entry.values())
        with self._lock:
            if key in self._d or size > self.budget:
                return False
            while self.used + size > self.budget:
                far = self._farthest() if self.policy == "clairvoyant" else None
                if far is None or far[0] <= next_use:
                    return False
                self._evict(far[1])
            self._d[key], self._size[key] = entry, size
            self.used += size
            self._mark(key, next_use)
        return True

    def _evict(self, key: Hashable) -> None:
        del self._d[key]
        self.used -= self._size.pop(key)
        self._next.pop(key, None)
        self.evictions += 1

    def contains(self, key: Hashable) -> bool:
        with self._lock:
            return key in self._d

    def has_room(self) -> bool:
        return self.budget > 0 and self.used < self.budget

    def stats(self) -> dict[str, Any]:
        total = self.hits + self.misses
        return {"compression": self.compression, "policy": self.policy,
                "budget_mb": round(self.budget / 2**20, 1),
                "used_mb": round(self.used / 2**20, 1), "entries": len(self._d),
                "evictions": self.evictions,
                "hit_rate": round(self.hits / total, 4) if total else None}


def choose_compression(option: str, sample: dict[str, np.ndarray], raw_total_bytes: int,
                       budget_bytes: int) -> str:
    """Resolve ``"auto"`` to ``"none"`` or ``"blosc2"`` (see the module docstring)."""
    if option != "auto":
        return option if option in ("none", "blosc2") else "none"
    if raw_total_bytes <= budget_bytes or _blosc2() is None:
        return "none"
    raw = sum(v.nbytes for v in sample.values())
    packed = sum(_nbytes(_pack(v)) for v in sample.values())
    return "blosc2" if packed < 0.8 * raw else "none"
