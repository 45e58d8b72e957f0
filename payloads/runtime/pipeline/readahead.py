"""Read-ahead for sources of many files: the opens and the storage waits of the blocks an epoch
reads next, done by a thread ahead of the reader (docs/data.md, "Many files").

An epoch over thousands of small files reads one or a few blocks from each file. The loader's
reader thread then pays, per block, a file open and close (on Lustre, GPFS or NFS an open is a
metadata round trip) and, where the file is not in the page cache (just staged, or evicted
since), a read that waits on the storage, one at a time: queue depth 1, while a few large files
are read ahead by the kernel's own readahead. The order of an epoch is known in advance
(plan.py), so one thread walks it up to ``depth`` blocks ahead of the reader, a batch of
blocks at a time: it opens their files (bare descriptors, through the process's LRU of open
files, :meth:`OpenFiles.open_ahead`: the reader then finds them open, and the bound holds, the
depth being at most a quarter of it) and asks the kernel for the blocks' bytes
(``posix_fadvise(WILLNEED)``: asynchronous, the reads of a whole batch are in flight at once);
a file read through HDF5 (filtered) is hinted whole when small. The reader reads as before:
nothing it reads depends on the read-ahead, which only warms what it will read (the order, the
rows and the shuffle are unchanged), skips blocks the RAM cache holds, and is best effort (the
reader meets a bad file itself and reports it).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Sequence
from typing import Any

log = logging.getLogger("gridml.payload")

MIN_FILES = 64        # sources with fewer files are left to the kernel's own readahead
MAX_DEPTH = 64        # blocks ahead of the reader
PROBE_READS = 64      # file reads timed before deciding (ShardedLoader._probed)
SLOW_READ_S = 100e-6  # a median block read this slow waits (storage, opens): read ahead

SPAN_BYTES = 1 << 20  # a file's runs within this many bytes are hinted as one
WHOLE_FILE_BYTES = 16 << 20  # an HDF5-read file is hinted whole up to this size
_WILLNEED = getattr(os, "POSIX_FADV_WILLNEED", None)


def wanted(source: Any) -> bool:
    """Whether ``source`` (an H5Source) has files enough for the read-ahead to pay."""
    return len(getattr(source, "paths", ())) >= MIN_FILES and hasattr(source, "pool")


class ReadAhead:
    """Opens the files of the order given by :meth:`begin` and hints their blocks' bytes, a
    batch of blocks at a time, up to ``depth`` places ahead of the reader's place (:meth:`at`);
    in a thread of its own (``thread``), else in the reader's, inside :meth:`at`."""

    def __init__(self, source: Any, depth: int | None = None, thread: bool = True) -> None:
        self.src = source
        self.depth = max(2, depth or min(MAX_DEPTH, source.pool.capacity // 4))
        self._batch = max(1, self.depth // 2)  # blocks warmed at a time
        self._cond = threading.Condition()
        self._order: Sequence[int | None] = ()
        self._next = 0          # the next place to warm
        self._pos = -1          # the reader's place
        self._sleeping = False
        self._stop = False
        self.warmed = self.opened = 0
        self._thread: threading.Thread | None = None
        if thread:
            self._thread = threading.Thread(target=self._work, daemon=True,
                                            name="gridml-readahead")
            self._thread.start()

    def begin(self, blocks: Sequence[int | None], start: int = 0) -> None:
        """A new pass: ``blocks`` (indices into the source's blocks, None where nothing is to
        be read: cached), in the order the reader reads them, from place ``start``."""
        with self._cond:
            self._order, self._next, self._pos = blocks, start, start - 1
            self._cond.notify_all()

    def at(self, place: int) -> None:
        """The reader is at ``place`` of the current pass (cheap: called per block). When
        fewer than ``depth - batch`` places ahead of it are warm, the next batch is due."""
        self._pos = place
        if place + self.depth - self._batch < self._next:
            return
        if self._thread is None:
            if (blocks := self._due()) is not None:
                self._warm_quietly(blocks)
        elif self._sleeping:
            with self._cond:
                self._cond.notify()

    def close(self) -> None:
        with self._cond:
            self._stop = True
            self._order = ()
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(2.0)

    def _due(self) -> list[int] | None:
        """The blocks from the next place to ``depth`` ahead of the reader, if a batch."""
        j = max(self._next, self._pos)
        z = min(len(self._order), self._pos + self.depth)
        if z - j < min(self._batch, len(self._order) - j) or j >= len(self._order):
            return None
        self._next = z
        return [b for b in self._order[j:z] if b is not None]

    def _work(self) -> None:
        while True:
            with self._cond:
                while not self._stop and (blocks := self._due()) is None:
                    self._sleeping = True  # until the reader has moved a batch on
                    self._cond.wait(1.0)
                    self._sleeping = False
                if self._stop:
                    return
            if blocks:
                self._warm_quietly(blocks)

    def _warm_quietly(self, blocks: list[int]) -> None:
        try:
            self._warm(blocks)
        except Exception:  # best effort: the reader meets the same file and says what
            log.debug("read-ahead: %s", blocks[:1], exc_info=True)

    def _warm(self, blocks: list[int]) -> None:
        src = self.src
        spans: dict[str, list[tuple[int, int]] | None] = {}
        for b in blocks:
            block = src.blocks[b]
            path = src.paths[block.file]
            direct = src._direct[block.file]
            if direct and all(r is not None for r in direct.values()):
                if path not in spans:
                    spans[path] = []
                runs = spans[path]
                if runs is not None:
                    for r in direct.values():
                        runs += r.spans(block.start, block.stop)
            else:
                spans[path] = None  # read through HDF5: the whole file, if small

        def hint(runs: list[tuple[int, int]] | None) -> Any:
            def warm(fd: int) -> None:
                if _WILLNEED is None:
                    return
                if runs is None:
                    if os.fstat(fd).st_size <= WHOLE_FILE_BYTES:
                        os.posix_fadvise(fd, 0, 0, _WILLNEED)
                    return
                lo, hi = min(o for o, _ in runs), max(o + n for o, n in runs)
                if hi - lo <= SPAN_BYTES:  # a small file's blocks: one hint for them all
                    os.posix_fadvise(fd, lo, hi - lo, _WILLNEED)
                    return
                for off, n in runs:
                    os.posix_fadvise(fd, off, n, _WILLNEED)
            return warm

        self.opened += src.pool.open_ahead([(p, hint(r)) for p, r in spans.items()])
        self.warmed += len(blocks)
