"""The input pipeline: each rank's shuffled shard, read ahead in background threads.

Three stages, bounded queues between them:

1. reader thread: walks the epochs in the order :mod:`payloads.runtime.pipeline.plan` fixes, so it
   reads exactly the blocks training needs next (clairvoyant prefetch), and fills a window
   buffer (reused, no page faults) with whole-chunk reads, or copies from the RAM cache; then
   draws the window's row permutation;
2. shuffle thread: gathers the window's rows in that order (``np.take``, which releases the
   GIL) into a new array, or with ``slabs(reuse=True)`` into a recycled buffer, and cuts the
   result into *slabs* of k batches (views: ``(k, batch, ...)``). The random gather is the
   pipeline's most expensive step (~40-50 ns a 256-byte row, whatever the access pattern), so
   with ``gather_threads`` > 1 each slab's gather is split by rows over that many threads;
   the buffers are allocated pre-faulted (``MAP_POPULATE``: a first touch fault costs ~6 us a
   page in a VM, a quarter of a second for a trial's buffers);
3. consumer (training): takes slabs; the time it is blocked there is the input wait.

Unfiltered data, and chunks compressed with HDF5's shuffle/deflate, are read without HDF5
(:mod:`payloads.runtime.pipeline.chunkio`: ``preadv``, and ``zlib``, both releasing the GIL);
other data through h5py, which holds its lock (and the GIL) while it reads and decodes.
"""

from __future__ import annotations

import collections
import mmap
import queue
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from collections.abc import Callable, Generator, Iterable, Iterator

import numpy as np

from payloads.runtime.pipeline import plan, readahead
from payloads.runtime.pipeline.cache import NEVER, BlockCache
from payloads.runtime.pipeline.h5source import H5Source

Arrays = dict[str, np.ndarray]
_END = object()
_NEW = object()  # a buffer not allocated yet: the stage that first needs it allocates it
_HELD = 2  # recycled slab buffers the consumer may still be using


class _Failed:
    def __init__(self, error: BaseException) -> None:
        self.error = error


class ShardedLoader:
    """Batches of (features, labels) for one rank; features is an array or a tuple of arrays."""

    def __init__(self, source: H5Source, features: list[str], labels: str, *, batch: int,
                 rank: int = 0, ranks: int = 1, seed: int = 0, shuffle: bool = True,
                 window: int = 8, prefetch: int = 4, cache: BlockCache | None = None,
                 processes: int = 0, gather_threads: int = 1, weights: str | None = None,
                 views: dict[str, tuple[str, list[int]]] | None = None,
                 read_ahead: bool | None = None) -> None:
        self.src, self.features, self.labels = source, list(features), labels
        # weights: a column carried beside the labels; views: model inputs made of some
        # channels (last axis) of another input, {name: (source input, channel indices)}
        self.weights, self.views = weights, dict(views or {})
        self.named = False  # xy gives several features as a dict by name (data.inputs)
        self.names = [f for f in self.features if f not in self.views] + [labels] + (
            [weights] if weights else [])
        self.batch, self.rank, self.ranks, self.seed = int(batch), rank, ranks, seed
        self.shuffle, self.window, self.prefetch = shuffle, max(1, window), max(1, prefetch)
        self.cache = cache or BlockCache(0)
        self._pos: dict[int, dict[int, int]] = {}
        self.processes = int(processes)   # HDF5 reader processes (0: read in a thread)
        self._reader: Any = None
        self.gather_threads = max(1, int(gather_threads))  # threads that gather one slab
        self._pool: ThreadPoolExecutor | None = None
        self._requested: set[int] = set()
        self._pieces_memo: dict[tuple[Any, ...], list[plan.Piece]] = {}  # see pieces()
        # opens and disk waits of the next blocks in threads ahead of the reader (readahead.py;
        # None: where the source has many files and the blocks are read in this process)
        self.read_ahead = read_ahead
        self._ra: readahead.ReadAhead | None = None
        self._probe: list[Any] | None = None  # [pieces, [seconds a read]]: see _probed
        self.read_wait_us: float | None = None
        self._decoded: Iterator[Arrays] = iter(())
        self._block_bytes = source.block_rows * sum(
            int(np.prod(source.row_shapes[n], dtype=np.int64)) * source.dtypes[n].itemsize
            for n in self.names if n in source.row_shapes)
        self.wait_s = 0.0          # time the consumer spent blocked on the next slab
        self.batches_out = self.samples_out = 0
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._outs: queue.Queue | None = None  # recycled slab buffers (slabs(reuse=True))
        self._alloc: Callable[..., np.ndarray] | None = None  # their allocator
        self._skip = 0  # batches of the first epoch the read stage leaves out (slabs(skip=))

    # --- the plan -------------------------------------------------------------------------
    @property
    def rows_per_epoch(self) -> int:
        return plan.rows_per_rank(self.src.total_rows, self.ranks)

    @property
    def steps_per_epoch(self) -> int:
        return plan.steps(self.rows_per_epoch, self.batch)

    def pieces(self, epoch: int) -> list[plan.Piece]:
        """This rank's pieces of ``epoch``, in order (memoised, a few epochs: the read stage
        and the cache's next uses ask for the same epochs; 10,000 blocks cost ~50 ms)."""
        key = (epoch, self.seed, self.shuffle, self.rank, self.ranks)
        memo = self._pieces_memo
        if key not in memo:
            order = plan.block_order(len(self.src.blocks), self.seed, epoch, self.shuffle,
                                     files=getattr(self.src, "block_files", None),
                                     cycle=getattr(self.src, "shuffle_cycle", 0))
            if len(memo) > 3:
                memo.pop(next(iter(memo)))
            memo[key] = plan.rank_pieces(self.src.blocks, order, self.rank, self.ranks)
        return memo[key]

    # --- stage 1: read windows ------------------------------------------------------------
    def _new_buffer(self, alloc: Callable[..., np.ndarray] | None = None,
                    rows: int | None = None) -> Arrays:
        """One array per column of ``rows`` rows (default: a window's)."""
        rows = rows or self.window * self.src.block_rows
        alloc = alloc or prefaulted
        return {n: alloc((rows, *self.src.row_shapes[n]), self.src.dtypes[n])
                for n in self.names}

    def _window_buffer(self, free: queue.Queue) -> Arrays | None:
        """The next free window buffer, allocated on first use (None: stopping). The buffers
        are made in the reader's thread, one at a time as it first needs them, not before the
        stages start: pre-faulting them all (~50 MB) delayed a trial's first batch ~40 ms."""
        buf = self._get(free)
        return self._new_buffer() if buf is _NEW else buf

    def _positions(self, epoch: int) -> dict[int, int]:
        """block -> its place in this rank's order of ``epoch`` (memoised, a few epochs)."""
        if epoch not in self._pos:
            if len(self._pos) > 3:
                self._pos.pop(min(self._pos))
            self._pos[epoch] = {p.block: i for i, p in enumerate(self.pieces(epoch))}
        return self._pos[epoch]

    def next_use(self, block: int, epoch: int, index: int) -> float:
        """When this rank needs ``block`` again after place ``index`` of ``epoch`` (for the
        clairvoyant cache): a place in this epoch or the next one, else never (as far as we
        look). Validation passes read the same blocks every epoch: always soon."""
        if not self.shuffle:
            return -1.0
        span = len(self.src.blocks) + 1
        for e in (epoch, epoch + 1):
            i = self._positions(e).get(block)
            if i is not None and (e > epoch or i > index):
                return float(e * span + i)
        return NEVER

    def _fill(self, group: list[plan.Piece], buf: Arrays, epoch: int = 0, first: int = 0) -> int:
        """Read the pieces of one window into ``buf``; returns the number of rows.
        ``first`` is the place of the window's first piece in the epoch's order."""
        at, ra = 0, self._ra
        for i, p in enumerate(group, first):
            if ra is not None:
                ra.at(i)
            key, nu = (id(self.src), p.block), self.next_use(p.block, epoch, i)
            block = self.cache.get(key, nu) if self.cache.budget else None
            if block is None and i in self._requested:  # decoded by a reader process
                block = next(self._decoded)
                if self.cache.wants(nu, self._block_bytes):
                    self.cache.put(key, {n: a.copy() for n, a in block.items()}, nu)
            elif block is None and self.cache.wants(nu, self._block_bytes):
                t0 = time.perf_counter() if self._probe else 0.0
                block = self.src.read(self.src.blocks[p.block])
                if self._probe:
                    self._probed(time.perf_counter() - t0, i)
                self.cache.put(key, block, nu)
            if block is None:
                t0 = time.perf_counter() if self._probe else 0.0
                self.src.read_into(self.src.blocks[p.block], p.lo, p.hi, buf, at)
                if self._probe:
                    self._probed(time.perf_counter() - t0, i)
            else:
                for n in self.names:
                    buf[n][at:at + p.rows] = block[n][p.lo:p.hi]
            at += p.rows
        return at

    def _request(self, pieces: list[plan.Piece], start: int = 0) -> None:
        """With reader processes: ask them for every block of the epoch not in the cache, in
        the epoch's order (they decode ahead, in parallel); from place ``start`` on."""
        self._requested = set()
        if not self.processes:
            return
        if self._reader is None:
            from payloads.runtime.pipeline.procreader import ProcessReader

            self._reader = ProcessReader(self.src.paths, self.names, self._block_bytes,
                                         self.processes)
        self._requested = {i for i, p in enumerate(pieces)
                           if i >= start and not self.cache.contains((id(self.src), p.block))}
        self._decoded = self._reader.read_in_order(
            [self.src.blocks[p.block] for i, p in enumerate(pieces) if i in self._requested])

    def _read_ahead(self, pieces: list[plan.Piece], start: int, now: bool = False) -> None:
        """Start the read-ahead's pass over this epoch's blocks still to be read here (not
        cached, not decoded by reader processes), from place ``start``. By default
        (``read_ahead`` None) only for a source of many files, and only once reads are seen to
        wait (:meth:`_probed`): where the files' pages are in memory already, the read-ahead
        thread's opens cost more than they save on two cores (measured: 0.6-0.8x the rate)."""
        self._probe = None
        if self.processes or self.read_ahead is False or not (
                self.read_ahead or readahead.wanted(self.src)):
            return
        if self._ra is None and not (self.read_ahead or now):
            self._probe = [pieces, []]  # the reads of this epoch, timed until decided
            return
        if self._ra is None:
            self._ra = readahead.ReadAhead(self.src)
        sid, cached = id(self.src), self.cache.budget > 0
        self._ra.begin([None if i < start or i in self._requested
                        or (cached and self.cache.contains((sid, p.block))) else p.block
                        for i, p in enumerate(pieces)], start)

    def _probed(self, seconds: float, place: int) -> None:
        """One file read of the probe took ``seconds``: after ``readahead.PROBE_READS`` of
        them, the read-ahead starts if their median took ``readahead.SLOW_READ_S`` or more
        (the storage, or the opens, wait; the median: a read preempted on a busy machine is
        not a slow disk), else the probe ends for this epoch."""
        probe = self._probe
        assert probe is not None
        probe[1].append(seconds)
        if len(probe[1]) < readahead.PROBE_READS:
            return
        self._probe = None
        median = float(np.median(probe[1]))
        self.read_wait_us = round(1e6 * median, 1)  # the last probe's
        if median >= readahead.SLOW_READ_S:
            readahead.log.info("input files: a block read waits %.0f us (median): reading "
                               "ahead (opens and page-cache hints, %d files)", 1e6 * median,
                               len(self.src.paths))
            self._read_ahead(probe[0], place + 1, now=True)

    def _read_stage(self, epochs: list[int], free: queue.Queue, out: queue.Queue) -> None:
        """``self._skip``: batches of the first epoch not to deliver (resumed mid-epoch): the
        windows wholly before them are not read at all, the window they end in is read and its
        first rows (in the epoch's order) dropped, so what follows is batch for batch what an
        uninterrupted epoch gives."""
        drop = self._skip * self.batch
        for epoch in epochs:
            pieces = self.pieces(epoch)
            groups = plan.windows(pieces, self.window)
            first = start = 0
            while start < len(groups) and drop >= (rows := sum(p.rows for p in groups[start])):
                drop -= rows  # a window the resumed epoch had trained on already: never read
                first += len(groups[start])
                start += 1
            self._request(pieces, first)
            self._read_ahead(pieces, first)
            for w, group in enumerate(groups[start:], start):
                buf = self._window_buffer(free)
                if buf is None:
                    return
                n = self._fill(group, buf, epoch, first)
                first += len(group)
                # the row order is drawn here, beside the (GIL-free) reads, not in the gather's
                # thread: the two threads' work is more even
                perm = (plan.row_permutation(n, self.seed, epoch, self.rank, w) if self.shuffle
                        else None)
                if drop:  # the resumed epoch's first rows within this window: left out
                    keep = perm[drop:] if perm is not None else np.arange(drop, n)
                    for a in buf.values():
                        a[:n - drop] = np.take(a[:n], keep, axis=0)
                    n, perm, drop = n - drop, None, 0
                if not self._put(out, (epoch, w, buf, n, perm)):
                    return
            drop = 0

    def close(self) -> None:
        """Stop the reader processes, the read-ahead and the gather threads, if any."""
        if self._ra is not None:
            self._ra.close()
            self._ra = None
        if self._reader is not None:
            self._reader.close()
            self._reader = None
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None

    # --- stage 2: shuffle and cut -----------------------------------------------------------
    def _slab_rows(self) -> int:
        """Rows gathered into one output slab: whole batches, about ``_SLAB_BYTES`` (not a whole
        window: the recycled slab buffers stay few and small, the first touch of fresh memory
        is costly, and the consumer reads a slab while it is still in cache)."""
        row = self._block_bytes // max(1, self.src.block_rows)
        k = max(1, _SLAB_BYTES // max(1, row * self.batch))
        return min(k * self.batch, max(self.batch, -(-self.window * self.src.block_rows
                                                      // self.batch) * self.batch))

    def _shuffle_stage(self, windows: queue.Queue, free: queue.Queue, out: queue.Queue) -> None:
        """Each window's rows, in its permutation's order, are gathered slab by slab into
        buffers of :meth:`_slab_rows` rows (the recycled ones with ``slabs(reuse=True)``); the
        rows left over at a window's end (< one batch) open the next window's first slab."""
        carry: Arrays | None = None  # an owned copy of < batch rows
        epoch_now = None
        size = self._slab_rows()
        while (item := self._get(windows)) is not None and item is not _END:
            if isinstance(item, _Failed):  # the reader failed: pass it on, stop
                self._put(out, item)
                return
            epoch, _w, buf, n, perm = item
            if epoch != epoch_now and carry is not None:  # the last partial batch of an epoch
                if not self._put(out, _slab1(carry)):
                    return
                carry = None
            epoch_now = epoch
            at = 0
            while at < n:
                c = 0 if carry is None else len(carry[self.labels])
                take = min(n - at, size - c)
                dest = None
                if self._outs is not None and (dest := self._get(self._outs)) is None:
                    return
                if dest is _NEW:  # the ring's buffers are allocated as first needed
                    dest = self._new_buffer(self._alloc, size)
                rows: Arrays = {}
                for k, a in buf.items():
                    d = (dest[k] if dest is not None
                         else np.empty((c + take, *a.shape[1:]), a.dtype))[:c + take]
                    if carry is not None:
                        d[:c] = carry[k]
                    idx = None if perm is None else perm[at:at + take]
                    self._gather(a[:n] if idx is not None else a[at:at + take], idx, d[c:])
                    rows[k] = d
                at += take
                full = (c + take) // self.batch * self.batch
                carry = {k: a[full:].copy() for k, a in rows.items()} if full < c + take else None
                if not full:  # nothing of this buffer goes out
                    if dest is not None and self._outs is not None:  # back to the ring
                        self._outs.put(dest)
                    continue
                slab = {k: a[:full].reshape(full // self.batch, self.batch, *a.shape[1:])
                        for k, a in rows.items()}
                if not self._put(out, slab if dest is None else _Owned(slab, dest)):
                    return
            free.put(buf)
        if carry is not None:
            self._put(out, _slab1(carry))

    def _gather(self, a: np.ndarray, perm: np.ndarray | None,
                out: np.ndarray | None) -> np.ndarray:
        """:func:`_gather`, split by rows over ``gather_threads`` threads (this one and a pool)
        when the rows are enough to pay for the hand-off (np.take releases the GIL)."""
        parts = self.gather_threads
        if parts == 1 or perm is None or len(perm) * a[:1].nbytes < _SPLIT_BYTES:
            return _gather(a, perm, out)
        if out is None:
            out = np.empty((len(perm), *a.shape[1:]), a.dtype)
        if self._pool is None:
            self._pool = ThreadPoolExecutor(parts - 1, thread_name_prefix=f"gridml-gather-r{self.rank}")
        edges = np.linspace(0, len(perm), parts + 1).astype(int)
        jobs = [self._pool.submit(_gather, a, perm[lo:hi], out[lo:hi])
                for lo, hi in zip(edges[1:-1], edges[2:])]
        _gather(a, perm[:edges[1]], out[:edges[1]])
        for j in jobs:
            j.result()
        return out

    # --- plumbing ---------------------------------------------------------------------------
    def _put(self, q: queue.Queue, item: Any) -> bool:
        while not self._stop.is_set():
            try:
                q.put(item, timeout=0.2)
                return True
            except queue.Full:
                continue
        return False

    def _get(self, q: queue.Queue) -> Any:
        while not self._stop.is_set():
            try:
                return q.get(timeout=0.2)
            except queue.Empty:
                continue
        return None

    def _guard(self, fn: Callable[..., None], out: queue.Queue, *args: Any) -> None:
        """Run a stage; an error travels downstream to the consumer, which raises it."""
        try:
            fn(*args)
            self._put(out, _END)
        except BaseException as e:
            self._put(out, _Failed(e))

    def _queue_depth(self) -> int:
        """Slabs in flight: at least ``prefetch`` batches ahead, never fewer than 2 slabs."""
        per_slab = max(1, self._slab_rows() // self.batch)
        return max(2, -(-self.prefetch // per_slab))

    def _start(self, epochs: list[int], reuse: bool, alloc: Callable[..., np.ndarray] | None,
               skip: int = 0) -> tuple[queue.Queue, list[threading.Thread]]:
        free: queue.Queue = queue.Queue()
        for _ in range(_WINDOW_BUFFERS):
            free.put(_NEW)
        windows: queue.Queue = queue.Queue(maxsize=2)
        slabs: queue.Queue = queue.Queue(maxsize=self._queue_depth())
        self._outs, self._alloc = None, alloc
        if reuse:  # queued slabs + the two the consumer may still use + the one being filled
            self._outs = queue.Queue()
            for _ in range(self._queue_depth() + _HELD + 1):  # allocated as first needed,
                # except by a given allocator (pinned memory: made in the consumer's thread,
                # where the rank's GPU is the current device)
                self._outs.put(_NEW if alloc is None else self._new_buffer(alloc, self._slab_rows()))
        self._skip = skip  # read by _read_stage
        stages = [(self._read_stage, windows, (epochs, free, windows)),
                  (self._shuffle_stage, slabs, (windows, free, slabs))]
        threads = [threading.Thread(target=self._guard, args=(fn, out, *args), daemon=True,
                                    name=f"gridml-{fn.__name__.strip('_')}-r{self.rank}")
                   for fn, out, args in stages]
        for t in threads:
            t.start()
        return slabs, threads

    # --- stage 3: the consumer ----------------------------------------------------------------
    def slabs(self, epochs: Iterable[int], reuse: bool = False,
              alloc: Callable[..., np.ndarray] | None = None,
              skip: int = 0) -> Generator[Arrays, None, None]:
        """Yield the slabs of ``epochs`` while the stages read ahead; times the waits.
        ``skip``: leave out the first ``skip`` batches of the first epoch (a trial resumed from
        a mid-epoch checkpoint), reading as little of them as the windows allow.

        ``reuse``: slabs are gathered into a ring of recycled buffers (``alloc(shape, dtype)``,
        e.g. pinned memory; default ``np.empty``): a slab, and every batch view of it, is valid
        only until the consumer has taken two more slabs. For training loops, which are done
        with a batch when they ask for the next one; not for code that keeps batches."""
        self._stop.clear()
        # a loader with a read stage of its own (ragged) reads the skipped batches and drops
        # them here; this one's read stage does not even read them
        direct = type(self)._read_stage is ShardedLoader._read_stage
        q, threads = self._start(list(epochs), reuse, alloc, skip if direct else 0)
        left = 0 if direct else max(0, skip)
        held: collections.deque[Arrays] = collections.deque()
        try:
            while True:
                t0 = time.perf_counter()
                item = q.get()
                self.wait_s += time.perf_counter() - t0
                if item is _END:
                    break
                if isinstance(item, _Failed):
                    self.error = item.error
                    raise item.error
                if isinstance(item, _Owned):
                    held.append(item.buf)
                    item = item.slab
                    if len(held) > _HELD and self._outs is not None:
                        self._outs.put(held.popleft())
                if left:
                    if (k := item[self.labels].shape[0]) <= left:
                        left -= k
                        continue
                    item, left = {n: a[left:] for n, a in item.items()}, 0
                for v, (of, idx) in self.views.items():
                    item[v] = np.take(item[of], idx, axis=-1)
                self.batches_out += item[self.labels].shape[0]
                self.samples_out += item[self.labels].shape[0] * item[self.labels].shape[1]
                yield item
        finally:
            self._stop.set()
            for t in threads:
                t.join(5.0)

    def batches(self, epochs: Iterable[int], reuse: bool = False) -> Iterator[tuple[Any, Any]]:
        """Yield (features, labels) batches of ``epochs`` (``reuse``: see :meth:`slabs`)."""
        for slab in self.slabs(epochs, reuse=reuse):
            for i in range(len(slab[self.labels])):
                yield self.xy({k: a[i] for k, a in slab.items()})

    def epoch_batches(self, epoch: int) -> Generator[Arrays, None, None]:
        """The batches of one epoch as dicts (for tests and tools)."""
        for slab in self.slabs([epoch]):
            for i in range(len(slab[self.labels])):
                yield {k: a[i] for k, a in slab.items()}

    def row_shape(self, name: str) -> tuple[Any, ...]:
        """Shape of one row of ``name`` in a batch (None: varies from batch to batch)."""
        if name in self.views:
            of, idx = self.views[name]
            return (*self.row_shape(of)[:-1], len(idx))
        return tuple(self.src.row_shapes[name])

    def dtype(self, name: str) -> Any:
        if name in self.views:
            return self.dtype(self.views[name][0])
        return self.src.dtypes[name]

    def xy(self, b: dict[str, Any]) -> tuple[Any, ...]:
        """(features, labels), or (features, labels, weights) with weights; several features
        as a tuple, or with ``named`` (``data.inputs``) a dict by name (Keras matches them to
        the model's inputs by name)."""
        xs = tuple(b[f] for f in self.features)
        x: Any = xs[0] if len(xs) == 1 else xs
        if self.named and len(xs) > 1:
            x = dict(zip(self.features, xs))
        if self.weights:
            return x, b[self.labels], b[self.weights]
        return x, b[self.labels]


class _Owned:
    """A slab that is a view of a recycled buffer (``slabs(reuse=True)``)."""

    def __init__(self, slab: Arrays, buf: Arrays) -> None:
        self.slab, self.buf = slab, buf


_WINDOW_BUFFERS = 3
_SPLIT_BYTES = 1 << 20  # smaller gathers are done by one thread
_SLAB_BYTES = 4 << 20   # about this much of a window is gathered into one output slab


def prefaulted(shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    """``np.empty`` whose pages are mapped at once (``MAP_POPULATE``, Linux): the loader's
    buffers are touched row by row in random order, and each first-touch page fault costs
    microseconds (more in a VM); the kernel maps them in bulk several times faster. Elsewhere,
    or for small buffers, plain ``np.empty``."""
    dt = np.dtype(dtype)
    size = int(np.prod(shape, dtype=np.int64)) * dt.itemsize
    flags = getattr(mmap, "MAP_POPULATE", 0)
    if size < _SPLIT_BYTES or not flags:
        return np.empty(shape, dt)
    try:
        m = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | flags)
    except (OSError, ValueError):
        return np.empty(shape, dt)
    return np.frombuffer(m, dt).reshape(shape)  # the array keeps the mapping alive


def _gather(a: np.ndarray, perm: np.ndarray | None, out: np.ndarray | None) -> np.ndarray:
    """Rows of ``a`` in the order ``perm`` (None: as they are), into ``out`` when given.
    ``np.take`` releases the GIL and is ~3x faster than fancy indexing; with ``out`` it needs
    ``mode="clip"`` (the permutation is in range), else numpy gathers into a temporary first."""
    if perm is None:
        if out is None:
            return a.copy()
        np.copyto(out, a)
        return out
    if out is None:
        return np.take(a, perm, axis=0)
    return np.take(a, perm, axis=0, out=out, mode="clip")


def _slab1(rows: Arrays) -> Arrays:
    return {k: a[None] for k, a in rows.items()}


def tf_dataset(loader: ShardedLoader, epochs: Iterable[int] | None, options: Any,
               prefetch: int = 2, skip: int = 0) -> Any:
    """A ``tf.data.Dataset`` of (features, labels) batches over ``loader.slabs(epochs)``
    (``None``: one unshuffled pass, restarted whenever Keras iterates it again, as it does
    for validation). A slab crosses into TensorFlow as one tensor and is cut into batches in
    C++ (``from_tensor_slices``): one Python call per slab instead of one per batch; the last
    ``prefetch`` batches are staged by tf.data's own thread, so the per-batch slicing overlaps
    the training step too."""
    import tensorflow as tf

    def spec(n: str) -> Any:
        return tf.TensorSpec((None, None, *loader.row_shape(n)), tf.as_dtype(loader.dtype(n)))

    xs: Any = tuple(spec(f) for f in loader.features)
    if loader.named and len(xs) > 1:
        xs = dict(zip(loader.features, xs))
    elif len(xs) == 1:
        xs = xs[0]
    signature = (xs, spec(loader.labels), *([spec(loader.weights)] if loader.weights else []))
    eps = list(epochs) if epochs is not None else [0]

    def gen() -> Iterator[tuple[Any, ...]]:
        for slab in loader.slabs(eps, skip=skip):
            yield loader.xy(slab)

    ds = tf.data.Dataset.from_generator(gen, output_signature=signature)
    ds = ds.flat_map(lambda *xyw: tf.data.Dataset.from_tensor_slices(xyw))
    if prefetch:
        ds = ds.prefetch(prefetch)
    return ds.with_options(options)
