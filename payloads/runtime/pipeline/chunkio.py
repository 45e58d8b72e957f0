"""Direct reads of uncompressed HDF5 data: ``os.preadv`` of the rows' bytes into the caller's
buffer, bypassing HDF5's selection machinery (and h5py's lock and the GIL, which ``preadv``
releases while it copies).

Where it applies: a dataset stored unfiltered (no compression, no shuffle or checksum filter),
contiguous or chunked with whole rows per chunk (``chunks[1:] == shape[1:]``), every chunk
allocated, a plain numeric dtype, no external storage, and byte offsets that HDF5 itself
confirms: at open, the first and last rows read both ways must be identical, else the dataset
is read through h5py as before. Rows of a chunk are contiguous in the file (C order), so
rows ``[a, b)`` of a chunk are one positional read of ``(b - a) * row_bytes`` bytes.

Measured on the shared 2-core machine (benchmarks/input_pipeline.py, uncompressed): whole-chunk
``preadv`` into a reused buffer 2-3x the rate of h5py slicing (``x[s:s + chunk]``) and of
``read_direct`` with a destination selection, which gridml used before.

Compressed chunks too (issue 28: thousands of small gzip files): a chunked dataset whose filter
pipeline is HDF5's own ``shuffle`` and/or ``deflate`` (what ``h5py``'s ``compression="gzip"``,
``shuffle=True`` and ``gridml demo-data`` write) is read the same way, one chunk at a time: its
stored bytes with one ``pread``, inflated with :mod:`zlib` (which releases the GIL), un-shuffled
with numpy. That is what HDF5 itself does to such a chunk, without opening the file in HDF5:
an HDF5 open of a filtered file costs ~1.5-3 ms here (holding the GIL), which 10,000 one-chunk
files paid every epoch. Other filters (lzf, szip, blosc, fletcher32), a chunk that skipped a
filter (its filter mask), or partial edge chunks left unfiltered: HDF5 reads it, as before.
"""

from __future__ import annotations

import os
import zlib
from typing import Any

import numpy as np

# HDF5's filter ids decoded here (H5Zpublic.h: H5Z_FILTER_DEFLATE, H5Z_FILTER_SHUFFLE)
FILTERS = {1: "deflate", 2: "shuffle"}


class DirectRows:
    """Byte offsets of one dataset's rows in its file; ``read(a, b, out)`` fills ``out`` (a
    C-contiguous array of ``b - a`` rows) with rows ``[a, b)``. ``sizes`` and ``filters`` (in
    the order HDF5 applied them when writing) for compressed chunks: each chunk is then read
    whole and decoded."""

    def __init__(self, fd: int, offsets: np.ndarray, chunk_rows: int, row_bytes: int,
                 rows: int, sizes: np.ndarray | None = None, filters: tuple[str, ...] = (),
                 itemsize: int = 1) -> None:
        self.fd, self.offsets, self.chunk_rows = fd, offsets, chunk_rows
        self.row_bytes, self.rows = row_bytes, rows
        self.sizes, self.filters, self.itemsize = sizes, tuple(filters), int(itemsize)

    def read(self, a: int, b: int, out: np.ndarray, fd: int | None = None) -> None:
        """``fd``: the file's descriptor now (it changes when the file is reopened; default:
        the one given at open)."""
        fd = self.fd if fd is None else fd
        if not (0 <= a <= b <= self.rows):
            raise ValueError(f"rows {a}-{b} out of range (0-{self.rows})")
        view = out.data.cast("B")
        if view.nbytes != (b - a) * self.row_bytes:
            raise ValueError("destination does not hold exactly the rows asked for")
        at, c, rb = 0, self.chunk_rows, self.row_bytes
        while a < b:
            k, lo = divmod(a, c)
            z = min(b, (k + 1) * c)
            want = (z - a) * rb
            if self.sizes is not None:
                chunk = self.chunk(k, fd)
                view[at:at + want] = chunk[lo * rb:lo * rb + want]
            else:
                got = os.preadv(fd, [view[at:at + want]], int(self.offsets[k]) + lo * rb)
                if got != want:
                    raise OSError(f"short read: {got} of {want} bytes at rows {a}-{z} "
                                  "(the file is truncated)")
            at += want
            a = z

    def chunk(self, k: int, fd: int | None = None) -> memoryview:
        """Chunk ``k`` of a compressed dataset, decoded (``chunk_rows * row_bytes`` bytes).
        The last chunk decoded is kept (one for the whole process, replaced as one tuple, so a
        thread never sees another's half-written entry): a block read in two parts decodes once."""
        global _last_chunk
        memo = _last_chunk
        if memo[0] is self and memo[1] == k:
            return memo[2]
        assert self.sizes is not None
        fd = self.fd if fd is None else fd
        size, at = int(self.sizes[k]), int(self.offsets[k])
        raw = os.pread(fd, size, at)
        if len(raw) != size:
            raise OSError(f"short read: {len(raw)} of {size} bytes of chunk {k} at byte {at} "
                          "(the file is truncated)")
        data: bytes = raw
        for f in reversed(self.filters):
            if f == "deflate":
                data = zlib.decompress(data)
            else:  # shuffle: byte j of every element first, for j in 0..itemsize-1
                n = len(data) // self.itemsize
                head = np.frombuffer(data, np.uint8, n * self.itemsize)
                data = head.reshape(self.itemsize, n).T.tobytes() + data[n * self.itemsize:]
        if len(data) != self.chunk_rows * self.row_bytes:
            raise OSError(f"chunk {k} decodes to {len(data)} bytes, not "
                          f"{self.chunk_rows * self.row_bytes}")
        view = memoryview(data)
        _last_chunk = (self, k, view)
        return view

    def spans(self, a: int, b: int) -> list[tuple[int, int]]:
        """The (byte offset, byte count) runs in the file that rows ``[a, b)`` occupy (one per
        chunk touched): what :meth:`read` reads, for the read-ahead's page-cache hints."""
        out, c, rb = [], self.chunk_rows, self.row_bytes
        a, b = max(0, a), min(b, self.rows)
        while a < b:
            k, lo = divmod(a, c)
            z = min(b, (k + 1) * c)
            if self.sizes is not None:
                out.append((int(self.offsets[k]), int(self.sizes[k])))
            else:
                out.append((int(self.offsets[k]) + lo * rb, (z - a) * rb))
            a = z
        return out


# the chunk DirectRows.chunk decoded last: (reader, chunk index, bytes)
_last_chunk: tuple[Any, int, memoryview] = (None, -1, memoryview(b""))


def open_direct(path: str, dset: Any, fd: int, verify: bool = True) -> DirectRows | None:
    """A :class:`DirectRows` for ``dset`` (an h5py Dataset of the file at ``path``, opened as
    ``fd``), or None where only HDF5 can read it correctly. ``verify``: HDF5 reads the first
    and last rows too, which must be the same (without: the structural checks only, for the
    files of a set whose first file was verified)."""
    try:
        return _open(dset, fd, verify)
    except Exception:  # an h5py/HDF5 without the calls used here, or anything unexpected
        return None


def _open(dset: Any, fd: int, verify: bool = True) -> DirectRows | None:
    from h5py import h5d

    dsid = dset if isinstance(dset, h5d.DatasetID) else dset.id  # a Dataset or its DatasetID
    shape, dt = tuple(dsid.shape), dsid.dtype
    if (not shape or shape[0] == 0 or dt.fields is not None or dt.subdtype is not None
            or dt.kind not in "iuf"):
        return None
    plist = dsid.get_create_plist()
    if plist.get_external_count() != 0:
        return None
    filters = _filters(plist, dt.itemsize)
    if filters is None:
        return None
    rows = int(shape[0])
    row_bytes = int(np.prod(shape[1:], dtype=np.int64)) * dt.itemsize
    layout = plist.get_layout()
    if layout == h5d.CONTIGUOUS and not filters:
        off = dsid.get_offset()
        if off is None:
            return None
        d = DirectRows(fd, np.array([off], np.int64), rows, row_bytes, rows)
    elif layout == h5d.CHUNKED:
        chunks = plist.get_chunk()
        if tuple(chunks[1:]) != tuple(shape[1:]):
            return None
        c = int(chunks[0])
        n = -(-rows // c)
        offsets = np.full(n, -1, np.int64)
        sizes = np.zeros(n, np.int64)
        masks: list[int] = []

        def visit(info: Any) -> None:
            k = info.chunk_offset[0] // c
            offsets[k], sizes[k] = info.byte_offset, info.size
            if info.filter_mask:
                masks.append(k)

        if hasattr(dsid, "chunk_iter"):
            dsid.chunk_iter(visit)
        else:
            for i in range(dsid.get_num_chunks()):
                visit(dsid.get_chunk_info(i))
        if (offsets < 0).any() or masks:  # unallocated chunks hold the fill value, a chunk
            return None                   # that skipped a filter: HDF5 knows what to do
        d = (DirectRows(fd, offsets, c, row_bytes, rows, sizes, filters, dt.itemsize)
             if filters else DirectRows(fd, offsets, c, row_bytes, rows))
    else:
        return None
    # HDF5 confirms the offsets (a user block, a driver, a layout we did not foresee)
    for a in ({0, max(0, rows - 64)} if verify else ()):
        b = min(rows, a + 64)
        mine = np.empty((b - a, *shape[1:]), dt)
        d.read(a, b, mine)
        if mine.tobytes() != _hdf5_rows(dsid, a, b).tobytes():
            return None
    return d


def _filters(plist: Any, itemsize: int) -> tuple[str, ...] | None:
    """The dataset's filter pipeline as names in the order HDF5 applies them when writing, or
    None where this module cannot decode it (another filter, a shuffle of another element
    size, or edge chunks stored unfiltered)."""
    names: list[str] = []
    for i in range(plist.get_nfilters()):
        code, _flags, values, _name = plist.get_filter(i)
        name = FILTERS.get(int(code))
        if name is None or name in names:
            return None
        if name == "shuffle" and values and int(values[0]) != itemsize:
            return None
        names.append(name)
    if names and hasattr(plist, "get_chunk_opts") and plist.get_chunk_opts():
        return None  # H5D_CHUNK_DONT_FILTER_PARTIAL_CHUNKS: the edge chunk is stored raw
    return tuple(names)


def _hdf5_rows(dsid: Any, a: int, b: int) -> np.ndarray:
    """Rows [a, b) as HDF5 reads them, through the low-level calls (a file's readers are made
    when it is first read: h5py's slicing costs ~4x more, which 10,000 files notice)."""
    from h5py import h5s

    out = np.empty((b - a, *dsid.shape[1:]), dsid.dtype)
    space = dsid.get_space()
    space.select_hyperslab((a, *[0] * (len(dsid.shape) - 1)), out.shape)
    dsid.read(h5s.create_simple(out.shape), space, out)
    return out
