"""The input pipeline: each rank's shuffled shard, read ahead in a background thread.

A producer thread walks the epochs in the order :mod:`payloads.runtime.plan` fixes (so it reads
exactly the blocks training will need next: clairvoyant prefetch), takes blocks from the RAM
cache or reads them as whole chunks, shuffles rows within windows, cuts batches and puts them
in a bounded queue (``prefetch`` batches deep). Training takes batches from the queue; the time
it spends blocked there is the input wait reported per epoch.
"""

from __future__ import annotations

import queue
import threading
import time
from typing import Any, Iterable, Iterator

import numpy as np

from payloads.runtime import plan
from payloads.runtime.cache import BlockCache
from payloads.runtime.h5source import H5Source

Batch = tuple[Any, np.ndarray]
_END = object()


class ShardedLoader:
    """Batches of (features, labels) for one rank; features is an array or a tuple of arrays."""

    def __init__(self, source: H5Source, features: list[str], labels: str, *, batch: int,
                 rank: int = 0, ranks: int = 1, seed: int = 0, shuffle: bool = True,
                 window: int = 8, prefetch: int = 4, cache: BlockCache | None = None) -> None:
        self.src, self.features, self.labels = source, list(features), labels
        self.batch, self.rank, self.ranks, self.seed = int(batch), rank, ranks, seed
        self.shuffle, self.window, self.prefetch = shuffle, window, max(1, prefetch)
        self.cache = cache or BlockCache(0)
        self.wait_s = 0.0          # time the consumer spent blocked on the next batch
        self.batches_out = self.samples_out = 0
        self.error: BaseException | None = None
        self._stop = threading.Event()

    # --- the plan -------------------------------------------------------------------------
    @property
    def rows_per_epoch(self) -> int:
        return plan.rows_per_rank(self.src.total_rows, self.ranks)

    @property
    def steps_per_epoch(self) -> int:
        return plan.steps(self.rows_per_epoch, self.batch)

    def pieces(self, epoch: int) -> list[plan.Piece]:
        order = plan.block_order(len(self.src.blocks), self.seed, epoch, self.shuffle)
        return plan.rank_pieces(self.src.blocks, order, self.rank, self.ranks)

    # --- producing ------------------------------------------------------------------------
    def _block(self, index: int) -> dict[str, np.ndarray]:
        key = (id(self.src), index)
        arrays = self.cache.get(key)
        if arrays is None:
            arrays = self.src.read(self.src.blocks[index])
            self.cache.put(key, arrays)
        return arrays

    def _window_rows(self, pieces: list[plan.Piece]) -> dict[str, np.ndarray]:
        parts = [(self._block(p.block), p) for p in pieces]
        return {n: np.concatenate([a[n][p.lo:p.hi] for a, p in parts])
                for n in self.features + [self.labels]}

    def epoch_batches(self, epoch: int) -> Iterator[dict[str, np.ndarray]]:
        """The batches of ``epoch`` for this rank, synchronously (the producer's body)."""
        carry: dict[str, np.ndarray] | None = None
        for w, group in enumerate(plan.windows(self.pieces(epoch), self.window)):
            rows = self._window_rows(group)
            if self.shuffle:
                perm = plan.row_permutation(len(rows[self.labels]), self.seed, epoch, self.rank, w)
                rows = {n: a[perm] for n, a in rows.items()}
            if carry is not None:
                rows = {n: np.concatenate([carry[n], a]) for n, a in rows.items()}
            n = len(rows[self.labels]) // self.batch * self.batch
            for s in range(0, n, self.batch):
                yield {k: a[s:s + self.batch] for k, a in rows.items()}
            carry = {k: a[n:] for k, a in rows.items()}
        if carry is not None and len(carry[self.labels]):
            yield carry

    def _produce(self, epochs: Iterable[int], q: queue.Queue) -> None:
        try:
            for epoch in epochs:
                for b in self.epoch_batches(epoch):
                    while not self._stop.is_set():
                        try:
                            q.put(b, timeout=0.2)
                            break
                        except queue.Full:
                            continue
                    if self._stop.is_set():
                        return
        except BaseException as e:  # noqa: BLE001 - handed to the consumer, raised there
            self.error = e
        q.put(_END)

    # --- consuming ------------------------------------------------------------------------
    def batches(self, epochs: Iterable[int]) -> Iterator[Batch]:
        """Yield (features, labels) for ``epochs`` while a thread reads ahead."""
        q: queue.Queue = queue.Queue(maxsize=self.prefetch)
        t = threading.Thread(target=self._produce, args=(list(epochs), q),
                             name=f"gridml-loader-r{self.rank}", daemon=True)
        t.start()
        try:
            while True:
                t0 = time.perf_counter()
                item = q.get()
                self.wait_s += time.perf_counter() - t0
                if item is _END:
                    break
                yield self._as_xy(item)
        finally:
            self._stop.set()
            t.join(5.0)
            self._stop.clear()
        if self.error is not None:
            raise self.error

    def _as_xy(self, b: dict[str, np.ndarray]) -> Batch:
        self.batches_out += 1
        self.samples_out += len(b[self.labels])
        x = tuple(b[f] for f in self.features)
        return (x[0] if len(x) == 1 else x), b[self.labels]


def tf_dataset(loader: ShardedLoader, epochs: Iterable[int] | None, options: Any) -> Any:
    """A ``tf.data.Dataset`` over ``loader.batches(epochs)`` (``None``: one unshuffled pass,
    restarted whenever Keras iterates it again, as it does for validation)."""
    import tensorflow as tf

    src = loader.src
    spec = [tf.TensorSpec((None, *src.row_shapes[f]), tf.as_dtype(src.dtypes[f]))
            for f in loader.features]
    x_spec = spec[0] if len(spec) == 1 else tuple(spec)
    y_spec = tf.TensorSpec((None, *src.row_shapes[loader.labels]),
                           tf.as_dtype(src.dtypes[loader.labels]))
    eps = list(epochs) if epochs is not None else [0]
    ds = tf.data.Dataset.from_generator(lambda: loader.batches(eps),
                                        output_signature=(x_spec, y_spec))
    return ds.with_options(options)
