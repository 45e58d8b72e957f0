"""The trial's HDF5 files as one row space of chunk-aligned blocks, checked up front, read with
at most a bounded number of files open at a time.

Every file must hold the named datasets with the same row count, and the same per-row shape and
dtype as the first file. A file that cannot be opened (missing, truncated, corrupt superblock) or
read (a damaged chunk) raises :class:`InputDataError` naming the file and the reason.

Open files (docs/data.md, "Many files"): a process-wide LRU (:class:`OpenFiles`) holds at most
``max_open_files`` files open (one descriptor each: the direct reads of chunkio.py use HDF5's
own descriptor of the file), shared by every source of the process (training, validation, test).
The bound is ``data.max_open_files`` or, by default, sized from the soft ``RLIMIT_NOFILE``, which
the payload raises to the hard limit first (:func:`raise_nofile_limit`, logged once), leaving
room for the framework's own descriptors. The checks at start open each file once (low-level
``h5f.open``/``h5d.open``, ~3x cheaper than ``h5py.File``), and a file leaves the LRU by dropping
its HDF5 identifiers, not by ``h5py.File.close``: h5py's close walks every open object of the
process (measured: closing 2,200 files 43 s, 4,400 files 158 s), dropping the identifiers closes
only that file. Running out of descriptors anyway (the framework took more than foreseen) first
halves the LRU and retries; only with no file left to close does it fail, with exit code 2 and
the limit and the fix in the message (:class:`DescriptorLimitError`).

Layout records (layouts.py): a file whose record the catalog has (trial.json's ``data.layouts``,
:func:`use_layouts`) and whose size is the recorded one is checked from the record, the same
checks and messages, and its direct readers made from the recorded offsets: it is not opened at
start. The first file is always opened, and its record compared with what HDF5 says (they
disagree: no record is used). ``check_opened`` / ``check_from_records`` count the two kinds.
"""

from __future__ import annotations

import errno
import logging
import math
import os
import resource
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import h5py
import numpy as np
from h5py import h5d

from payloads.runtime.errors import InputDataError, PayloadFailure
from payloads.runtime.pipeline import layouts
from payloads.runtime.pipeline import chunkio
from payloads.runtime.pipeline.chunkio import DirectRows, open_direct

log = logging.getLogger("gridml.payload")

# the default bound never exceeds this: HDF5's open and close of a file scan its list of open
# files (measured: opening and checking 1,000 files with 768 held open ~1.6x slower than with 64)
DEFAULT_CAP = 256
MIN_OPEN = 8


@dataclass(frozen=True)
class Block:
    """Rows [start, stop) of file ``file``: one HDF5 chunk of the first dataset (or a few)."""

    file: int
    start: int
    stop: int

    @property
    def rows(self) -> int:
        return self.stop - self.start


class DescriptorLimitError(PayloadFailure):
    """The process ran out of file descriptors (EMFILE): deterministic, exit code 2."""

    def __init__(self, path: str, open_now: int) -> None:
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        super().__init__(
            f"input file {path}: cannot open it: the process is out of file descriptors "
            f"([Errno 24] Too many open files; RLIMIT_NOFILE soft {_lim(soft)}, hard {_lim(hard)}, "
            f"{open_now} input files open): raise the limit (ulimit -n {max(4096, 2 * _n(soft))} "
            "in the job's environment) or lower data.max_open_files in the spec", code=2)
        self.path = path


def _lim(v: int) -> str:
    return "unlimited" if v == resource.RLIM_INFINITY else str(v)


def _n(v: int) -> int:
    return 1 << 20 if v == resource.RLIM_INFINITY else int(v)


def is_emfile(e: BaseException) -> bool:
    """Whether ``e`` (an OSError, or HDF5's wrapped one) means "too many open files"."""
    if getattr(e, "errno", None) in (errno.EMFILE, errno.ENFILE):
        return True
    text = str(e)
    return "errno = 24" in text or "Too many open files" in text


# --- the descriptor limit -------------------------------------------------------------------
_raised: tuple[int, int] | None = None
_raise_lock = threading.Lock()


def raise_nofile_limit() -> tuple[int, int]:
    """Raise the soft ``RLIMIT_NOFILE`` to the hard limit, once per process (logged once);
    returns (soft, hard) after it."""
    global _raised
    with _raise_lock:
        if _raised is not None:
            return _raised
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        target = min(_n(hard), 1 << 20)
        if soft != resource.RLIM_INFINITY and soft < target:
            try:
                resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
                log.info("open files: soft limit raised from %d to %d (RLIMIT_NOFILE)", soft, target)
                soft = target
            except (ValueError, OSError) as e:
                log.info("open files: soft limit %d stays (cannot raise it to %d: %s)",
                         soft, target, e)
        _raised = (soft, hard)
        return _raised


def default_max_open(soft: int) -> int:
    """Input files held open by default under a soft descriptor limit ``soft``: the limit less
    a quarter (at least 128) for the framework (sockets, pipes, shared memory, libraries),
    at most :data:`DEFAULT_CAP`, at least :data:`MIN_OPEN`."""
    soft = _n(soft)
    return max(MIN_OPEN, min(DEFAULT_CAP, soft - max(128, soft // 4)))


# --- the LRU of open files ------------------------------------------------------------------
class _Open:
    """One open file: a descriptor, and its HDF5 file identifier and dataset handles when
    HDF5 is needed (a file read only with ``preadv`` is a bare descriptor: no HDF5 open)."""

    __slots__ = ("path", "fid", "dsids", "dsets", "fd", "own_fd", "pins")

    def __init__(self, path: str, hdf5: bool) -> None:
        self.path, self.pins, self.own_fd = path, 0, False
        self.fid: Any = None
        self.dsids: dict[str, Any] = {}
        self.dsets: dict[str, Any] = {}
        if hdf5:
            self.fd = -1
            self.hdf5()
        else:
            self.fd, self.own_fd = os.open(path, os.O_RDONLY), True

    def hdf5(self) -> None:
        """Open the file in HDF5 too (its sec2 descriptor then serves the direct reads: one
        descriptor a file)."""
        if self.fid is not None:
            return
        from h5py import h5f

        self.fid = h5f.open(os.fsencode(self.path), h5f.ACC_RDONLY)
        try:
            fd = int(self.fid.get_vfd_handle())
        except Exception:
            if self.fd < 0:
                self.fd, self.own_fd = os.open(self.path, os.O_RDONLY), True
            return
        if self.own_fd:
            os.close(self.fd)
        self.fd, self.own_fd = fd, False

    def dsid(self, name: str) -> Any:
        """The low-level dataset identifier (shape, dtype: ~5x cheaper than h5py.Dataset)."""
        d = self.dsids.get(name)
        if d is None:
            from h5py import h5d

            d = self.dsids[name] = h5d.open(self.fid, name.encode())
        return d

    def dset(self, name: str) -> Any:
        d = self.dsets.get(name)
        if d is None:
            d = self.dsets[name] = h5py.Dataset(self.dsid(name))
        return d

    def keys(self) -> list[str]:
        return sorted(h5py.File(self.fid).keys())

    def close(self) -> None:
        """Drop this file's identifiers: HDF5 closes the file (and its descriptor) when the
        last one goes, without the scan of every open object that h5py's close does."""
        if self.own_fd:
            try:
                os.close(self.fd)
            except OSError:
                pass
        self.dsets.clear()
        self.dsids.clear()
        self.fid = None


class OpenFiles:
    """At most ``capacity`` files open, least recently used closed first; thread-safe.
    ``with files.use(path) as f``: ``f`` stays open inside the block (pinned); ``hdf5=False``:
    a descriptor is enough (direct reads), HDF5 is opened only if asked for. A new file is
    opened outside the lock (room for it is reserved first, so the bound holds): another
    thread's open (the read-ahead's, readahead.py) never stalls a reader of a file already
    open, and on a filesystem where an open is a round trip (Lustre, GPFS, NFS) several
    threads' opens overlap."""

    def __init__(self, capacity: int) -> None:
        self.capacity = max(1, int(capacity))
        self._d: OrderedDict[str, _Open] = OrderedDict()
        self._lock = threading.RLock()
        self._opening = 0  # opens in progress outside the lock (their room is reserved)
        self.opens = self.evictions = self.peak = 0

    def __len__(self) -> int:
        return len(self._d)

    @contextmanager
    def use(self, path: str, hdf5: bool = True) -> Iterator[_Open]:
        with self._lock:
            e = self._d.get(path)
            if e is not None:
                self._d.move_to_end(path)
                e.pins += 1  # not closed by anyone's shrinking while in use
            else:
                self._opening += 1
                self._shrink(self.capacity - self._opening)
        if e is None:
            e = self._open_new(path, hdf5)
        try:
            if hdf5 and e.fid is None:
                with self._lock:
                    self._retry(path, e.hdf5)
            yield e
        finally:
            with self._lock:
                e.pins -= 1
                self._shrink(self.capacity - self._opening)

    def _open_new(self, path: str, hdf5: bool) -> _Open:
        """Open ``path`` (its room reserved by ``use``) and enter it, pinned; a file another
        thread opened meanwhile is used instead (the new descriptor closed)."""
        try:
            new = self._retry(path, lambda: _Open(path, hdf5))
        except BaseException:
            with self._lock:
                self._opening -= 1
            raise
        with self._lock:  # the reserved room becomes the entry at once (no one else takes it)
            self._opening -= 1
            e = self._d.get(path)
            if e is None:
                e = self._d[path] = new
                self.opens += 1
                self.peak = max(self.peak, len(self._d) + self._opening)
            else:
                new.close()
                self._d.move_to_end(path)
            e.pins += 1
        return e

    def _shrink(self, keep: int) -> bool:
        """Close unpinned files, least recently used first, until at most ``keep`` are open;
        True if any was closed."""
        closed = False
        while len(self._d) > keep:
            # the least recently used file not in use (usually the very first: O(1))
            path = next((p for p, e in self._d.items() if not e.pins), None)
            if path is None:
                break
            self._d.pop(path).close()
            self.evictions += 1
            closed = True
        return closed

    def _retry(self, path: str, fn: Callable[[], Any]) -> Any:
        """``fn()`` (an open), retried with half the files open after EMFILE."""
        while True:
            try:
                return fn()
            except Exception as err:
                if not is_emfile(err):
                    if not Path(path).is_file():
                        raise InputDataError(path, "no such file (was it staged in?)") from None
                    raise InputDataError(path, f"not a readable HDF5 file ({_reason(err)})") from None
                # the framework holds more descriptors than foreseen: fewer input files open
                with self._lock:
                    if not self._shrink(len(self._d) // 2):
                        raise DescriptorLimitError(path, len(self._d)) from None
                    self.capacity = max(1, len(self._d) + 1)
                    log.warning("open files: out of descriptors with %d input files open; "
                                "holding at most %d from now on", 2 * len(self._d),
                                self.capacity)

    def open_ahead(self, wanted: Sequence[tuple[str, Callable[[int], None] | None]]) -> int:
        """Open bare descriptors of those of ``wanted``'s files not open yet, as the most
        recently used (the read-ahead's: readahead.py), calling each one's ``warm(fd)`` first
        (page-cache hints); one lock for the lot, the opens outside it, within the bound (at
        most the room that files not in use leave). Best effort: a file that cannot be opened
        is skipped (its reader reports it); returns how many were opened."""
        with self._lock:
            warm = dict(wanted)
            for p, fn in warm.items():  # open already: hinted now (fadvise does not wait)
                e = self._d.get(p)
                if e is not None and fn is not None:
                    try:
                        fn(e.fd)
                    except OSError:
                        pass
            todo = [p for p in warm if p not in self._d]
            pinned = sum(1 for e in self._d.values() if e.pins) if len(self._d) >= self.capacity else 0
            todo = todo[:max(0, self.capacity - self._opening - pinned - 1)]  # room for a reader
            if not todo:
                return 0
            self._opening += len(todo)
            self._shrink(self.capacity - self._opening)
        opened: list[_Open] = []
        try:
            for p in todo:
                try:
                    e = _Open(p, False)
                except OSError:
                    break  # out of descriptors, or a missing file: the reader says which
                opened.append(e)
                fn = warm.get(p)
                if fn is not None:
                    try:
                        fn(e.fd)
                    except OSError:
                        pass
        finally:
            with self._lock:
                self._opening -= len(todo)
                for e in opened:
                    if e.path in self._d:  # a reader opened it meanwhile
                        e.close()
                    else:
                        self._d[e.path] = e
                        self.opens += 1
                self.peak = max(self.peak, len(self._d) + self._opening)
                self._shrink(self.capacity - self._opening)
        return len(opened)

    def discard(self, path: str) -> None:
        """Close ``path`` now if no one is using it (its HDF5 open is no longer needed)."""
        with self._lock:
            e = self._d.get(path)
            if e is not None and not e.pins:
                self._d.pop(path).close()

    def close_all(self, paths: Sequence[str] | None = None) -> None:
        with self._lock:
            for p in list(self._d) if paths is None else paths:
                e = self._d.get(p)
                if e is not None and not e.pins:
                    self._d.pop(p).close()

    def stats(self) -> dict[str, int]:
        return {"max_open_files": self.capacity, "open": len(self._d), "peak_open": self.peak,
                "opens": self.opens, "evictions": self.evictions}


_pool: OpenFiles | None = None
_pool_lock = threading.Lock()


def open_files() -> OpenFiles:
    """The process's LRU of open input files (created at first use, sized by default)."""
    global _pool
    with _pool_lock:
        if _pool is None:
            soft, _hard = raise_nofile_limit()
            _pool = OpenFiles(default_max_open(soft))
            log.info("open files: at most %d input files open at a time (RLIMIT_NOFILE soft %s; "
                     "data.max_open_files sets it)", _pool.capacity, _lim(soft))
        return _pool


def set_max_open_files(n: int | None) -> OpenFiles:
    """``data.max_open_files``: the bound of this process's LRU (None: the default)."""
    pool = open_files()
    if n:
        with pool._lock:
            pool.capacity = max(1, int(n))
            pool._shrink(pool.capacity)
    return pool


def _reason(e: BaseException) -> str:
    text = " ".join(str(e).split())
    return text[:240] or type(e).__name__


# --- layout records ------------------------------------------------------------------------
_records: dict[str, dict[str, Any]] = {}


def use_layouts(sidecars: Sequence[str]) -> int:
    """trial.json's ``data.layouts``: the layout records (layouts.py) the sources of this
    process check their files with, instead of opening them; returns how many files have one.
    A sidecar that cannot be read is logged, and its files are opened as without."""
    recs, problems = layouts.read_sidecars(sidecars)
    for p in problems:
        log.info("layout records: cannot read %s: those files are opened at start", p)
    _records.clear()
    _records.update(recs)
    if recs:
        log.info("layout records: %d input files described by the catalog", len(recs))
    return len(recs)


def _direct_from(d: Mapping[str, Any], shape: tuple[int, ...], dtype: Any) -> DirectRows | None:
    """A direct reader from a record's ``direct`` entry (its byte offsets; the descriptor is
    given at each read), or None where HDF5 reads the dataset. Called once per file and
    dataset at start (20,000 times for 10,000 files): plain Python where it can be."""
    dr = d.get("direct")
    if not dr or not shape or shape[0] == 0:
        return None
    itemsize = _dtype(dtype).itemsize
    row_bytes = math.prod(shape[1:]) * itemsize  # (np.prod: 10x slower)
    offsets = _offsets(dr["offsets"])
    c = int(dr["chunk_rows"])
    if int(dr["row_bytes"]) != row_bytes or c <= 0 or len(offsets) != -(-shape[0] // c):
        return None
    filters = dr.get("filters")
    if not filters:
        return DirectRows(-1, offsets, c, row_bytes, int(shape[0]))
    filters = tuple(filters)
    sizes = _offsets(dr["sizes"])
    if (len(sizes) != len(offsets) or not _DECODED.issuperset(filters)
            or dr.get("itemsize") != itemsize):
        return None
    return DirectRows(-1, offsets, c, row_bytes, int(shape[0]), sizes, filters, itemsize)


_DECODED = frozenset(chunkio.FILTERS.values())
_DTYPES: dict[Any, np.dtype] = {}


def _dtype(spec: Any) -> np.dtype:
    """``np.dtype(spec)``, memoised (a record's dtype strings repeat for every file)."""
    dt = _DTYPES.get(spec)
    if dt is None:
        dt = _DTYPES[spec] = np.dtype(spec)
    return dt


def _offsets(enc: Any) -> Any:
    """A record's offsets (or sizes): a JSON list as it is (indexed with ``int()``), else
    decoded (start/step/count)."""
    return enc if type(enc) is list else layouts.decode_offsets(enc)


# --- the check pass over processes -----------------------------------------------------------
SCAN_FILES_PER_PROCESS = 1000


def scan_workers(files: int) -> int:
    """Processes for the start's check pass: one per 1,000 files, up to half this process's
    cores, at most 8; 1 (none) below 2,000 files or 4 cores (spawning costs ~1 s)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    if files < 2 * SCAN_FILES_PER_PROCESS or cores < 4:
        return 1
    return max(1, min(8, cores // 2, files // SCAN_FILES_PER_PROCESS))


def _scan_part(paths: list[str], names: list[str], direct: bool) -> tuple[Any, Any]:
    """In a spawned process: the check of ``paths`` as :class:`H5Source` does it; returns
    ((rows, row shapes, dtypes, chunks, direct readers) or None, (path, reason, code) or None):
    the files checked up to the first bad one, and that one's error."""
    src = H5Source.__new__(H5Source)
    src.paths, src.names, src.pool = list(paths), list(names), OpenFiles(8)
    src._use_direct, src._verified = direct, False
    src._direct = [None] * len(paths)
    src.row_shapes, src.dtypes, src._chunks = {}, {}, None
    rows: list[int] = []
    err = None
    for i in range(len(paths)):
        try:
            rows.append(src._check(i))
        except PayloadFailure as e:
            reason = str(e)
            prefix = f"input file {getattr(e, 'path', '')}: "
            err = (getattr(e, "path", paths[i]), reason.removeprefix(prefix), e.code)
            break
    src.pool.close_all()
    res = (rows, src.row_shapes, src.dtypes, src._chunks, src._direct[:len(rows)]) if rows else None
    return res, err


# --- the source -----------------------------------------------------------------------------
class _LazyList(Sequence[Any]):
    """``[fn(0), fn(1), ...]``, each item made when first asked for."""

    def __init__(self, n: int, fn: Callable[[int], Any]) -> None:
        self._n, self._fn = n, fn

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return [self._fn(j) for j in range(*i.indices(self._n))]
        if not -self._n <= i < self._n:
            raise IndexError(i)
        return self._fn(i % self._n)


class LazyDataset:
    """One dataset of one file, opened through the LRU at each access (nothing held open)."""

    def __init__(self, src: H5Source, file: int, name: str) -> None:
        self.src, self.file, self.name = src, file, name

    def _with(self, fn: Callable[[Any], Any]) -> Any:
        with self.src.pool.use(self.src.paths[self.file]) as e:
            return fn(e.dset(self.name))

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self._with(lambda d: d.shape))

    @property
    def dtype(self) -> Any:
        return self._with(lambda d: d.dtype)

    @property
    def chunks(self) -> Any:
        return self._with(lambda d: d.chunks)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, sel: Any) -> Any:
        return self._with(lambda d: d[sel])

    def read_direct(self, arr: np.ndarray, source_sel: Any = None, dest_sel: Any = None) -> None:
        self._with(lambda d: d.read_direct(arr, source_sel, dest_sel))


class LazyFile:
    """``source.files[i]``: ``f[name]`` gives a :class:`LazyDataset` (for code that reads a
    whole column of every file, e.g. the labels for class weights)."""

    def __init__(self, src: H5Source, file: int) -> None:
        self.src, self.file = src, file

    def __getitem__(self, name: str) -> LazyDataset:
        return LazyDataset(self.src, self.file, name)

    def __contains__(self, name: str) -> bool:
        with self.src.pool.use(self.src.paths[self.file]) as e:
            return name in e.keys()

    def keys(self) -> list[str]:
        with self.src.pool.use(self.src.paths[self.file]) as e:
            return e.keys()

    def close(self) -> None:
        pass


class H5Source:
    """Input files + dataset names; reads blocks as dicts of numpy arrays. Files are opened
    through the process's :class:`OpenFiles` LRU as blocks need them."""

    def __init__(self, paths: Sequence[str], names: Sequence[str], block_rows: int | None = None,
                 direct: bool = True, pool: OpenFiles | None = None,
                 scan_processes: int | None = None,
                 records: Mapping[str, Mapping[str, Any]] | None = None):
        if not paths:
            raise InputDataError("<none>", "no input files given")
        self.paths, self.names = [str(p) for p in paths], list(names)
        self.pool = pool if pool is not None else open_files()
        self._use_direct = direct
        self._direct: list[dict[str, DirectRows | None] | None] = [None] * len(self.paths)
        self._verified = False  # HDF5 confirmed the direct readers' offsets on one file
        self.row_shapes: dict[str, tuple[int, ...]] = {}
        self.dtypes: dict[str, Any] = {}
        self._chunks: Any = None
        # the per-file checks: from the files' layout records where the catalog has them (no
        # open, layouts.py), else one pass, each file opened once and checked against the first
        # (over processes when the files are many and the cores too: the opens are the cost)
        t0 = time.perf_counter()
        self.check_opened = self.check_from_records = 0
        trusted = self._trusted(_records if records is None else records)
        unknown = sum(r is None for r in trusted)
        k = scan_workers(unknown) if scan_processes is None else scan_processes
        if k > 1 and 2 * unknown > len(self.paths):
            self.rows = self._scan_in_processes(k)
            self.check_opened = len(self.paths)
        else:
            self.rows = []
            for i, rec in enumerate(trusted):
                if i == 0:
                    self.rows.append(self._check(0))
                    if rec is not None and not self._agrees(rec):
                        log.warning("layout records: %s differs from its record: the records "
                                    "are not used (each file is opened at start)", self.paths[0])
                        trusted = [None] * len(trusted)
                elif rec is None:
                    self.rows.append(self._check(i))
                else:
                    self.rows.append(self._check_record(i, rec))
            self.check_opened = sum(r is None for r in trusted[1:]) + 1
            self.check_from_records = len(self.paths) - self.check_opened
            if self.check_from_records:
                log.info("checked %d input files in %.2f s: %d from their layout records, "
                         "%d opened", len(self.paths), time.perf_counter() - t0,
                         self.check_from_records, self.check_opened)
        # the bound of the shuffle (plan.py): files beyond what the LRU holds are interleaved
        # a window of files at a time; fixed here, the same on every rank
        self.shuffle_cycle = (max(1, self.pool.capacity // 2)
                              if len(self.paths) > self.pool.capacity else 0)
        self.block_rows = int(block_rows or (int(self._chunks[0]) if self._chunks else 4096))
        self.blocks = self._make_blocks()
        self.block_files = [b.file for b in self.blocks]

    def _scan_in_processes(self, k: int) -> list[int]:
        """The check pass over ``k`` spawned processes, each over a contiguous part of the
        files (each part checked against its first file there, the parts' first files against
        file 0 here: a file that differs is still the one named)."""
        import multiprocessing as mp
        from concurrent.futures import ProcessPoolExecutor

        t0 = time.perf_counter()
        edges = [round(j * len(self.paths) / k) for j in range(k + 1)]
        parts = [self.paths[a:b] for a, b in zip(edges, edges[1:]) if b > a]
        with ProcessPoolExecutor(len(parts), mp_context=mp.get_context("spawn")) as ex:
            results = list(ex.map(_scan_part, parts, [self.names] * len(parts),
                                  [self._use_direct] * len(parts)))
        rows: list[int] = []
        for part, (res, err) in zip(parts, results):
            if res is not None:
                r, shapes, dtypes, chunks, direct = res
                if not rows:
                    self.row_shapes, self.dtypes, self._chunks = shapes, dtypes, chunks
                else:
                    for n in self.names:
                        if shapes[n] != self.row_shapes[n] or dtypes[n] != self.dtypes[n]:
                            raise InputDataError(
                                part[0], f"dataset '{n}' is {dtypes[n]}{shapes[n]}, but "
                                         f"{self.paths[0]} has {self.dtypes[n]}{self.row_shapes[n]}")
                self._direct[len(rows):len(rows) + len(r)] = direct
                rows += r
            if err is not None:
                path, reason, code = err
                if code == 3:
                    raise InputDataError(path, reason)
                raise PayloadFailure(reason, code=code)
        self._verified = True
        log.info("checked %d input files in %.1f s (%d processes)", len(self.paths),
                 time.perf_counter() - t0, len(parts))
        return rows

    @property
    def files(self) -> Sequence[LazyFile]:
        return _LazyList(len(self.paths), lambda i: LazyFile(self, i))

    @property
    def direct(self) -> Sequence[dict[str, DirectRows | None]]:
        """Per file, per dataset: its direct reader or None (made when first asked for)."""
        def one(i: int) -> dict[str, DirectRows | None]:
            with self.pool.use(self.paths[i]) as e:
                return self._direct_of(i, e)
        return _LazyList(len(self.paths), one)

    @property
    def total_rows(self) -> int:
        return sum(self.rows)

    def _check(self, i: int) -> int:
        path = self.paths[i]
        with self.pool.use(path) as e:
            ds = {}
            for n in self.names:
                try:
                    ds[n] = e.dsid(n)
                except Exception:
                    raise InputDataError(path, f"has no dataset '{n}' (found: {e.keys()})") from None
            shapes = {n: tuple(d.shape) for n, d in ds.items()}
            lens = {n: (s or (0,))[0] for n, s in shapes.items()}
            if len(set(lens.values())) != 1:
                raise InputDataError(path, f"datasets have different row counts {lens}")
            if i == 0:
                self.row_shapes = {n: s[1:] for n, s in shapes.items()}
                self.dtypes = {n: d.dtype for n, d in ds.items()}
                plist = ds[self.names[0]].get_create_plist()
                self._chunks = (plist.get_chunk() if plist.get_layout() == h5d.CHUNKED
                                else None)
            else:
                for n, d in ds.items():
                    if shapes[n][1:] != self.row_shapes[n] or d.dtype != self.dtypes[n]:
                        raise InputDataError(
                            path, f"dataset '{n}' is {d.dtype}{shapes[n][1:]}, but "
                                  f"{self.paths[0]} has {self.dtypes[n]}{self.row_shapes[n]}")
            # the direct readers, now that the file is open: its reads need no HDF5 open later
            self._direct_of(i, e)
        if i and not self._hdf5_needed(i):  # closed at once: HDF5 opens slow down with many
            self.pool.discard(path)          # files open, and the epochs reopen it bare
        return int(next(iter(lens.values())))

    def _trusted(self, records: Mapping[str, Mapping[str, Any]]) -> list[Mapping[str, Any] | None]:
        """Per file, its layout record if it can stand in for opening the file: one naming
        every dataset asked for, each of a plain dtype, made for a file of the size the file
        has now (one ``os.stat``); else None (the file is opened)."""
        if not records:
            return [None] * len(self.paths)
        out: list[Mapping[str, Any] | None] = []
        for p in self.paths:
            rec = records.get(p)
            try:
                ok = (rec is not None and rec.get("v") in layouts.VERSIONS
                      and all(rec["datasets"].get(n, {}).get("dtype") for n in self.names)
                      and os.stat(p).st_size == rec["bytes"])
            except (OSError, AttributeError, KeyError, TypeError):
                ok = False
            out.append(rec if ok else None)
        return out

    def _check_record(self, i: int, rec: Mapping[str, Any]) -> int:
        """:meth:`_check` of file ``i`` from its layout record: the same checks and messages,
        and its direct readers, without opening it."""
        path, ds = self.paths[i], {n: rec["datasets"][n] for n in self.names}
        shapes = {n: tuple(int(v) for v in d["shape"]) for n, d in ds.items()}
        lens = {n: (s or (0,))[0] for n, s in shapes.items()}
        if len(set(lens.values())) != 1:
            raise InputDataError(path, f"datasets have different row counts {lens}")
        for n, d in ds.items():
            dt = _dtype(d["dtype"])
            if shapes[n][1:] != self.row_shapes[n] or dt != self.dtypes[n]:
                raise InputDataError(
                    path, f"dataset '{n}' is {dt}{shapes[n][1:]}, but "
                          f"{self.paths[0]} has {self.dtypes[n]}{self.row_shapes[n]}")
        self._direct[i] = {n: (_direct_from(d, shapes[n], self.dtypes[n])
                               if self._use_direct else None) for n, d in ds.items()}
        return int(next(iter(lens.values())))

    def _agrees(self, rec: Mapping[str, Any]) -> bool:
        """Whether file 0's record says what opening it found (shapes, dtypes, offsets): a
        record of another layout than the reader expects is not trusted for any file."""
        try:
            if self._check_record_quiet(0, rec) != self.rows[0]:
                return False
            mine = self._direct[0] or {}
            for n in self.names:
                a, b = mine.get(n), _direct_from(rec["datasets"][n], (self.rows[0],
                                                 *self.row_shapes[n]), self.dtypes[n])
                if (a is None) != (b is None) or (a is not None and b is not None and (
                        a.chunk_rows != b.chunk_rows or not np.array_equal(a.offsets, b.offsets)
                        or a.filters != b.filters or (a.sizes is None) != (b.sizes is None)
                        or not np.array_equal(np.asarray(a.sizes), np.asarray(b.sizes)))):
                    return False
            return True
        except (InputDataError, KeyError, TypeError, ValueError):
            return False

    def _check_record_quiet(self, i: int, rec: Mapping[str, Any]) -> int:
        saved = self._direct[i]
        try:
            return self._check_record(i, rec)
        finally:
            self._direct[i] = saved

    def _make_blocks(self) -> list[Block]:
        b = self.block_rows
        return [Block(i, s, min(s + b, n)) for i, n in enumerate(self.rows) for s in range(0, n, b)]

    def _direct_of(self, i: int, e: _Open) -> dict[str, DirectRows | None]:
        """File ``i``'s direct readers (``e``: it, open), worked out once, at the check, and
        kept (they hold byte offsets, not the descriptor: that is the open file's). HDF5
        confirms the offsets on the first file and on any file with a user block; the
        others, whose layout passed the same structural checks, are trusted (a check of
        each file costs as much as opening it again)."""
        d = self._direct[i]
        if d is None:
            e.hdf5()
            verify = not self._verified or e.fid.get_create_plist().get_userblock() != 0
            d = {n: (open_direct(self.paths[i], e.dsid(n), e.fd, verify=verify)
                     if self._use_direct else None) for n in self.names}
            self._verified = self._verified or (verify and all(r is not None for r in d.values()))
            self._direct[i] = d
        return d

    def _hdf5_needed(self, i: int) -> bool:
        d = self._direct[i]
        return d is None or any(r is None for r in d.values())

    def read(self, block: Block) -> dict[str, np.ndarray]:
        """All datasets' rows of one block (a whole-chunk, contiguous read)."""
        try:
            with self.pool.use(self.paths[block.file], self._hdf5_needed(block.file)) as e:
                direct = self._direct_of(block.file, e)
                out = {}
                for n in self.names:
                    fast = direct.get(n)
                    if fast is None:
                        out[n] = e.dset(n)[block.start:block.stop]
                    else:
                        out[n] = np.empty((block.rows, *self.row_shapes[n]), self.dtypes[n])
                        fast.read(block.start, block.stop, out[n], e.fd)
                return out
        except PayloadFailure:
            raise
        except Exception as err:  # h5py raises OSError/KeyError/ValueError for damaged chunks
            raise self._damaged(block.file, block.start, block.stop, err) from None

    def read_into(self, block: Block, lo: int, hi: int, out: dict[str, np.ndarray],
                  at: int) -> None:
        """Rows [lo, hi) of ``block`` straight into ``out[name][at:...]`` (no temporary)."""
        a = block.start + lo
        try:
            with self.pool.use(self.paths[block.file], self._hdf5_needed(block.file)) as e:
                direct = self._direct_of(block.file, e)
                for n in self.names:
                    fast = direct.get(n)
                    if fast is not None:
                        fast.read(a, a + hi - lo, out[n][at:at + hi - lo], e.fd)
                    else:
                        d = e.dset(n)
                        if d.size:  # into a contiguous view: HDF5 copies straight into it
                            d.read_direct(out[n][at:at + hi - lo], np.s_[a:a + hi - lo])
        except PayloadFailure:
            raise
        except Exception as err:
            raise self._damaged(block.file, a, a + hi - lo, err) from None

    def _damaged(self, i: int, start: int, stop: int, e: BaseException) -> InputDataError:
        return InputDataError(self.paths[i], f"cannot read rows {start}-{stop} ({_reason(e)}): "
                                             "the file is corrupt or truncated")

    def head(self, n: int) -> dict[str, np.ndarray]:
        """The first ``n`` rows in file order (e.g. to adapt normalisation layers)."""
        parts: list[dict[str, np.ndarray]] = []
        for block in self.blocks:
            if n <= 0:
                break
            part = self.read(block)
            parts.append({k: v[:n] for k, v in part.items()})
            n -= block.rows
        return {k: np.concatenate([p[k] for p in parts]) for k in self.names}

    def close(self) -> None:
        """Close this source's files still open (each alone: O(files) in all)."""
        self.pool.close_all(self.paths)

    @property
    def all_direct(self) -> bool:
        """Every column is read with ``preadv`` (no HDF5 decoding to offload): judged on the
        files whose readers are known (the first file at least; a dataset's files are alike)."""
        if all(d is None for d in self._direct):
            _ = self.direct[0]
        return all(r is not None for d in self._direct if d is not None for r in d.values())

    def describe(self) -> dict[str, Any]:
        if all(d is None for d in self._direct):
            _ = self.direct[0]
        return {"files": self.paths, "rows": self.total_rows, "block_rows": self.block_rows,
                "blocks": len(self.blocks), "max_open_files": self.pool.capacity,
                "direct_reads": sorted({n for d in self._direct if d for n, r in d.items() if r})}
