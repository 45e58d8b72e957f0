"""The trial's HDF5 files as one row space of chunk-aligned blocks, checked up front.

Every file must hold the named datasets with the same row count, and the same per-row shape and
dtype as the first file. A file that cannot be opened (missing, truncated, corrupt superblock) or
read (a damaged chunk) raises :class:`InputDataError` naming the file and the reason.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any
from collections.abc import Sequence

import os

import h5py
import numpy as np

from payloads.runtime.pipeline.chunkio import DirectRows, open_direct
from payloads.runtime.errors import InputDataError


@dataclass(frozen=True)
class Block:
    """Rows [start, stop) of file ``file``: one HDF5 chunk of the first dataset (or a few)."""

    file: int
    start: int
    stop: int

    @property
    def rows(self) -> int:
        return self.stop - self.start


def _open(path: str) -> h5py.File:
    if not Path(path).is_file():
        raise InputDataError(path, "no such file (was it staged in?)")
    try:
        return h5py.File(path, "r")
    except OSError as e:
        raise InputDataError(path, f"not a readable HDF5 file ({_reason(e)})") from None


def _reason(e: BaseException) -> str:
    text = " ".join(str(e).split())
    return text[:240] or type(e).__name__


class H5Source:
    """Open files + dataset names; reads blocks as dicts of numpy arrays."""

    def __init__(self, paths: Sequence[str], names: Sequence[str], block_rows: int | None = None,
                 direct: bool = True):
        if not paths:
            raise InputDataError("<none>", "no input files given")
        self.paths, self.names = [str(p) for p in paths], list(names)
        self.files = [_open(p) for p in self.paths]
        self.rows = [self._check(i) for i in range(len(self.files))]
        # dataset handles looked up once: h5py's name lookup costs ~0.5 ms per access
        self.dsets = [{n: f[n] for n in self.names} for f in self.files]
        self.row_shapes = {n: self.files[0][n].shape[1:] for n in self.names}
        self.dtypes = {n: self.files[0][n].dtype for n in self.names}
        self.block_rows = int(block_rows or self._chunk_rows())
        self.blocks = self._make_blocks()
        # unfiltered datasets are read with preadv, bypassing HDF5 (payloads/runtime/pipeline/chunkio.py)
        self._fds: list[int] = []
        self.direct: list[dict[str, DirectRows | None]] = [{} for _ in self.paths]
        if direct:
            for i, p in enumerate(self.paths):
                fd = os.open(p, os.O_RDONLY)
                self._fds.append(fd)
                self.direct[i] = {n: open_direct(p, self.dsets[i][n], fd) for n in self.names}

    @property
    def total_rows(self) -> int:
        return sum(self.rows)

    def _check(self, i: int) -> int:
        f, path = self.files[i], self.paths[i]
        for n in self.names:
            if n not in f or not isinstance(f[n], h5py.Dataset):
                raise InputDataError(path, f"has no dataset '{n}' (found: {sorted(f.keys())})")
        lens = {n: (f[n].shape or (0,))[0] for n in self.names}
        if len(set(lens.values())) != 1:
            raise InputDataError(path, f"datasets have different row counts {lens}")
        if i > 0:
            for n in self.names:
                ref = self.files[0][n]
                if f[n].shape[1:] != ref.shape[1:] or f[n].dtype != ref.dtype:
                    raise InputDataError(
                        path, f"dataset '{n}' is {f[n].dtype}{f[n].shape[1:]}, but "
                              f"{self.paths[0]} has {ref.dtype}{ref.shape[1:]}")
        return int(next(iter(lens.values())))

    def _chunk_rows(self) -> int:
        chunks = self.files[0][self.names[0]].chunks
        return int(chunks[0]) if chunks else 4096

    def _make_blocks(self) -> list[Block]:
        b = self.block_rows
        return [Block(i, s, min(s + b, n)) for i, n in enumerate(self.rows) for s in range(0, n, b)]

    def read(self, block: Block) -> dict[str, np.ndarray]:
        """All datasets' rows of one block (a whole-chunk, contiguous read)."""
        d, direct = self.dsets[block.file], self.direct[block.file]
        try:
            out = {}
            for n in self.names:
                fast = direct.get(n)
                if fast is None:
                    out[n] = d[n][block.start:block.stop]
                else:
                    out[n] = np.empty((block.rows, *self.row_shapes[n]), self.dtypes[n])
                    fast.read(block.start, block.stop, out[n])
            return out
        except Exception as e:  # h5py raises OSError/KeyError/ValueError for damaged chunks
            raise self._damaged(block.file, block.start, block.stop, e) from None

    def read_into(self, block: Block, lo: int, hi: int, out: dict[str, np.ndarray],
                  at: int) -> None:
        """Rows [lo, hi) of ``block`` straight into ``out[name][at:...]`` (no temporary)."""
        d, a, direct = self.dsets[block.file], block.start + lo, self.direct[block.file]
        try:
            for n in self.names:
                fast = direct.get(n)
                if fast is not None:
                    fast.read(a, a + hi - lo, out[n][at:at + hi - lo])
                elif d[n].size:  # into a contiguous view: HDF5 copies straight into it
                    d[n].read_direct(out[n][at:at + hi - lo], np.s_[a:a + hi - lo])
        except Exception as e:
            raise self._damaged(block.file, a, a + hi - lo, e) from None

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
        for fd in self._fds:
            try:
                os.close(fd)
            except OSError:
                pass
        self._fds = []
        for f in self.files:
            try:
                f.close()
            except Exception:
                pass

    @property
    def all_direct(self) -> bool:
        """Every column of every file is read with ``preadv`` (no HDF5 decoding to offload)."""
        return all(d.get(n) is not None for d in self.direct for n in self.names)

    def describe(self) -> dict[str, Any]:
        return {"files": self.paths, "rows": self.total_rows, "block_rows": self.block_rows,
                "blocks": len(self.blocks),
                "direct_reads": sorted({n for d in self.direct for n, r in d.items() if r})}
