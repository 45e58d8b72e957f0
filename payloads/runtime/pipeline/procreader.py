"""Block reads in worker processes: parallel HDF5 decoding despite h5py's global lock.

h5py serialises every call through one lock and holds the GIL while gzip decodes, so threads
cannot decode two chunks at once. On a GPU node the CPU cores are free for input; this reader
uses them: ``processes`` workers (started with ``spawn``: safe after TensorFlow has started
its threads) open the files themselves, through their own LRU of open files bounded as the
rank's (h5source.py :class:`OpenFiles`; descriptors are per process), and decode whole blocks
straight into slots of one shared-memory segment; the loader's reader thread asks for blocks in the epoch's order, up to
``slots`` ahead (clairvoyant prefetch across processes), and copies each block out of its slot.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import queue
from collections import deque
from multiprocessing import shared_memory
from typing import Any
from collections.abc import Iterable, Iterator

import numpy as np

from payloads.runtime.errors import InputDataError, PayloadFailure

Layout = dict[str, tuple[int, tuple[int, ...], str]]  # name -> (offset, shape, dtype)


def _requests_while_parent_lives(requests: Any, parent: int) -> Iterator[Any]:
    """Requests until the None sentinel, or until the parent rank is gone (killed)."""
    while os.getppid() == parent:
        try:
            msg = requests.get(timeout=1.0)
        except queue.Empty:
            continue
        if msg is None:
            return
        yield msg


def _worker(paths: list[str], names: list[str], shm_name: str, slot_bytes: int,
            requests: Any, results: Any, parent: int, max_open: int = 0) -> None:
    from payloads.runtime.errors import PayloadFailure
    from payloads.runtime.pipeline.h5source import OpenFiles, default_max_open, raise_nofile_limit

    shm = shared_memory.SharedMemory(name=shm_name)
    # this process's own LRU of open files (descriptors are per process), bounded as the rank's
    files = OpenFiles(max_open or default_max_open(raise_nofile_limit()[0]))
    try:
        for msg in _requests_while_parent_lives(requests, parent):
            seq, slot, file, start, stop = msg
            try:
                with files.use(paths[file]) as f:
                    results.put((seq, slot, _read(f, names, shm, slot * slot_bytes, start, stop),
                                 None))
            except PayloadFailure as e:  # out of descriptors, a vanished file: said as is
                results.put((seq, slot, None, (str(e), e.code)))
            except Exception as e:
                results.put((seq, slot, None, f"{type(e).__name__}: {' '.join(str(e).split())}"))
    finally:
        files.close_all()
        shm.close()


def _read(f: Any, names: list[str], shm: Any, offset: int, start: int, stop: int) -> Layout:
    layout: Layout = {}
    for n in names:
        d = f.dset(n)
        shape = (stop - start, *d.shape[1:])
        arr: np.ndarray = np.ndarray(shape, d.dtype, buffer=shm.buf, offset=offset)
        if arr.size:
            d.read_direct(arr, np.s_[start:stop])
        layout[n] = (offset, shape, d.dtype.str)
        offset += arr.nbytes
    return layout


class ProcessReader:
    """``read_in_order(blocks)`` yields each block's arrays, decoded by worker processes."""

    def __init__(self, paths: list[str], names: list[str], slot_bytes: int, processes: int,
                 slots: int | None = None, max_open: int | None = None) -> None:
        if max_open is None:  # the rank's bound (data.max_open_files or the default)
            from payloads.runtime.pipeline.h5source import open_files

            max_open = open_files().capacity
        ctx = mp.get_context("spawn")
        self.paths, self.slot_bytes = paths, int(slot_bytes)
        self.slots = int(slots or 3 * processes)
        self.shm = shared_memory.SharedMemory(create=True, size=self.slot_bytes * self.slots)
        self.requests, self.results = ctx.Queue(), ctx.Queue()
        self.procs = [ctx.Process(target=_worker, daemon=True, name=f"gridml-reader-{i}",
                                  args=(paths, names, self.shm.name, self.slot_bytes,
                                        self.requests, self.results, os.getpid(), max_open))
                      for i in range(processes)]
        for p in self.procs:
            p.start()
        self.gen = 0        # one generation per read_in_order call
        self.inflight = 0   # requests sent, results not yet received

    def _drain(self) -> None:
        """Wait out the requests of an abandoned call: their slots are about to be reused."""
        while self.inflight:
            self._next_result()

    def _next_result(self) -> tuple[Any, ...]:
        """The next result from any worker; raises if a worker died (checked every second)."""
        while True:
            try:
                msg = self.results.get(timeout=1.0)
                break
            except queue.Empty:
                dead = [f"{p.name} (exit {p.exitcode})" for p in self.procs if not p.is_alive()]
                if dead:
                    raise RuntimeError(f"HDF5 reader processes died: {', '.join(dead)}") from None
        self.inflight -= 1
        return msg

    def read_in_order(self, blocks: Iterable[Any]) -> Iterator[dict[str, np.ndarray]]:
        """Blocks (``.file``, ``.start``, ``.stop``) in the given order; each yielded dict is
        a view of a shared slot, valid until the next item is requested."""
        self._drain()
        self.gen += 1
        todo, free = deque(enumerate(blocks)), deque(range(self.slots))
        done: dict[int, tuple[int, Layout | None, Any, Any]] = {}
        nxt = 0
        while todo or len(free) < self.slots:
            while todo and free:
                seq, b = todo.popleft()
                done[seq] = (-1, None, None, b)
                self.requests.put(((self.gen, seq), free.popleft(), b.file, b.start, b.stop))
                self.inflight += 1
            while done[nxt][0] < 0:
                self._collect(done)
            slot, layout, error, block = done.pop(nxt)
            if isinstance(error, tuple):  # a PayloadFailure in the worker: its message, code
                raise PayloadFailure(error[0], code=error[1])
            if error is not None:
                raise InputDataError(self.paths[block.file], f"cannot read rows {block.start}-"
                                     f"{block.stop} ({error}): the file is corrupt or truncated")
            yield {n: np.ndarray(shape, np.dtype(dt), buffer=self.shm.buf, offset=off)
                   for n, (off, shape, dt) in (layout or {}).items()}
            free.append(slot)
            nxt += 1

    def _collect(self, done: dict[int, Any]) -> None:
        (gen, seq), slot, layout, error = self._next_result()
        if gen == self.gen:
            done[seq] = (slot, layout, error, done[seq][3])

    def close(self) -> None:
        for _ in self.procs:
            self.requests.put(None)
        for p in self.procs:
            p.join(5)
            if p.is_alive():
                p.terminate()
        self.shm.close()
        self.shm.unlink()
