"""The local data store: Rucio's DID semantics in a directory with a SQLite catalogue.

Layout under ``root`` (``$GRIDML_HOME/store`` by default)::

    catalog.sqlite                    DIDs (file | dataset | container), contents, metadata
    <scope>/<h0h1>/<h2h3>/<name>      file contents; h = md5("scope:name") (Rucio's hash path)
    .tmp/                             uploads in flight (removed on success and on failure)

Semantics follow Rucio: a file DID is immutable (re-uploading the same bytes is a no-op, different
bytes under the same name are refused); datasets hold files, containers hold datasets/containers;
every file has its size and adler32. An HDF5 file also gets a layout record in its metadata
(``layout``: its datasets' shapes, dtypes and chunk offsets, payloads/runtime/pipeline/layouts.py),
which lets a trial's start check it without opening it (docs/data.md, "Many files").

Stage-in choice: the store *is* on this machine, so :meth:`LocalStore.stage_in` returns the stored
paths directly (after checking each file is present with its registered size) and copies nothing;
into ``dest`` goes only the dataset's layout sidecar (when its files have records). Payloads only
read their inputs.
:meth:`LocalStore.download` (``gridml data get``, ``gridml fetch``) copies and verifies adler32.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sqlite3
import stat
import uuid
from pathlib import Path
from typing import Any

from gridml.data.base import DID, FileInfo, adler32_file, parse_did
from gridml.data.catalog import Catalog, Row
from gridml.data.common import check_names, copy_verified, empty_error, not_found, resolve_pattern
from gridml.errors import ChecksumError, DataError
from payloads.runtime.pipeline.layouts import make_record, write_sidecar

RSE = "LOCAL"
HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"


class LocalStore:
    """A :class:`gridml.data.base.DataManager` on a local directory (see the module docstring)."""

    name = "local"

    def __init__(self, root: Path) -> None:
        self.root = Path(root).expanduser().resolve()
        self.root.mkdir(parents=True, exist_ok=True)
        self.catalog = Catalog(self.root / "catalog.sqlite")

    def __repr__(self) -> str:
        return f"LocalStore({str(self.root)!r})"

    @property
    def where(self) -> str:
        """Where DIDs are looked up, for messages."""
        return f"the local store {self.root}"

    # -- reading ---------------------------------------------------------------------------
    def exists(self, did: str) -> bool:
        d = parse_did(did)
        with self.catalog.read() as con:
            return Catalog.get(con, d) is not None

    def did_type(self, did: str) -> str:
        """``file``, ``dataset`` or ``container``; NotFoundError if unknown."""
        return self._get(parse_did(did)).type

    def list_files(self, did: str) -> list[FileInfo]:
        """The files of a file/dataset/container DID (may be empty); NotFoundError if unknown."""
        d = parse_did(did)
        with self.catalog.read() as con:
            root = Catalog.get(con, d)
            if root is None:
                raise not_found(d, self.where)
            return [self._info(r) for r in _files_under(con, root)]

    def resolve(self, did: str) -> list[FileInfo]:
        """Like list_files, but an empty DID or a file missing from disk is an error."""
        files = self.list_files(did)
        if not files:
            raise empty_error(parse_did(did), self.did_type(did))
        for f in files:  # one stat a file (10,000 files: is_file() and stat() were two)
            if f.path is None or not _is_file_of(f.path, f.bytes):
                raise DataError(f"{f.did} (in {did}) has no available replica: {f.path} is missing "
                                "or has the wrong size", hint="upload it again with `gridml data "
                                "put`, or restore the store directory")
        return files

    def list_dids(self, scope: str, pattern: str = "*") -> list[tuple[DID, str]]:
        """(DID, type) of every DID in ``scope`` whose name matches ``pattern`` (``*``, ``?``)."""
        scope, pattern = resolve_pattern(scope, pattern)
        with self.catalog.read() as con:
            return [(r.did, r.type) for r in Catalog.find(con, scope, pattern)]

    def get_metadata(self, did: str) -> dict[str, Any]:
        return dict(self._get(parse_did(did)).meta)

    # -- stage-in / download -----------------------------------------------------------------
    def stage_in(self, did: str, dest: Path) -> list[FileInfo]:
        """The stored files themselves (no copy, see the module docstring). Into ``dest`` goes
        only the dataset's layout sidecar, where its files have layout records (none: ``dest``
        is left untouched)."""
        files = self.resolve(did)
        write_sidecar(Path(dest), did, [(str(f.path), f.metadata.get("layout")) for f in files])
        return files

    def download(self, did: str, dest: Path) -> list[Path]:
        """Copy the files of ``did`` into ``dest`` (flat, by name), verifying adler32.

        A file already in ``dest`` with the right size and checksum is kept as it is."""
        dest = Path(dest)
        dest.mkdir(parents=True, exist_ok=True)
        out = []
        for f in self.resolve(did):
            assert f.path is not None
            out.append(copy_verified(f.path, dest / f.did.name, f.adler32, f.bytes, str(f.did)))
        return out

    # -- writing -----------------------------------------------------------------------------
    def add_dataset(self, did: str, *, metadata: dict[str, Any] | None = None) -> None:
        """Create an (empty) dataset; a no-op if it already exists as a dataset."""
        self._ensure_collection(parse_did(did), "dataset", metadata)

    def add_container(self, did: str, children: list[str]) -> None:
        """Create a container (if missing) and attach datasets/containers to it."""
        c = parse_did(did)
        kids = [parse_did(k) for k in children]
        self._ensure_collection(c, "container", None)
        with self.catalog.write() as con:
            for k in kids:
                row = Catalog.get(con, k)
                if row is None:
                    raise not_found(k, self.where)
                if row.type == "file":
                    raise DataError(f"cannot attach file {k} to container {c}",
                                    hint="containers hold datasets; put files in a dataset")
                if c in {r.did for r in _collections_under(con, row)}:
                    raise DataError(f"attaching {k} to {c} would make a cycle",
                                    hint="a container cannot contain itself")
                Catalog.attach(con, c, k)

    def set_metadata(self, did: str, metadata: dict[str, Any]) -> None:
        """Merge ``metadata`` into the DID's metadata (keys given replace old values)."""
        d = parse_did(did)
        with self.catalog.write() as con:
            row = Catalog.get(con, d)
            if row is None:
                raise not_found(d, self.where)
            Catalog.set_meta(con, d, {**row.meta, **metadata})

    def upload(self, files: list[Path], dataset: str, *, metadata: dict[str, Any] | None = None,
               names: list[str] | None = None, rse: str | None = None) -> list[FileInfo]:
        """Upload ``files`` into ``dataset`` (created if missing) as ``scope:names[i]``.

        All or nothing: files are copied to a temporary place and verified first, then moved into
        place and registered in one transaction; on any failure nothing new stays registered or
        on disk. ``metadata`` is merged into each uploaded file's metadata."""
        ds = parse_did(dataset)
        if rse not in (None, RSE):
            raise DataError(f"the local store has one RSE, {RSE}, not {rse!r}",
                            hint="leave --rse out, or use --backend rucio for Rucio's RSEs")
        files = [Path(f) for f in files]
        dids = [DID(ds.scope, n) for n in check_names(files, names, ds)]
        staged = [self._stage_tmp(f) for f in files]
        try:
            layouts = [_layout(tmp) for tmp, _, _ in staged]
            with self.catalog.write() as con:
                _ensure_collection(con, ds, "dataset", None)
                self._register(con, ds, dids, staged, metadata or {}, layouts)
        finally:
            for tmp, _, _ in staged:
                tmp.unlink(missing_ok=True)
        return [self._info(self._get(d)) for d in dids]

    # -- internals ---------------------------------------------------------------------------
    def _stage_tmp(self, src: Path) -> tuple[Path, int, str]:
        """Copy ``src`` to .tmp/, check the copy's adler32 against the source's."""
        if not src.is_file():
            raise DataError(f"cannot upload {src}: not a file",
                            hint="give paths of existing regular files")
        tmpdir = self.root / ".tmp"
        tmpdir.mkdir(exist_ok=True)
        tmp = tmpdir / f"{uuid.uuid4().hex}.part"
        want = adler32_file(src)
        shutil.copyfile(src, tmp)
        got = adler32_file(tmp)
        if got != want:
            tmp.unlink(missing_ok=True)
            raise ChecksumError(f"copy of {src} has adler32 {got}, expected {want}",
                                hint="the file changed while uploading, or the disk is failing: "
                                     "retry")
        return tmp, tmp.stat().st_size, want

    def _register(self, con: sqlite3.Connection, ds: DID, dids: list[DID],
                  staged: list[tuple[Path, int, str]], meta: dict[str, Any],
                  layouts: list[dict[str, Any] | None]) -> None:
        placed: list[Path] = []
        try:
            for did, (tmp, size, adler), lay in zip(dids, staged, layouts, strict=True):
                mine = {**meta, "layout": lay} if lay else meta
                if self._check_existing(con, did, size, adler):  # a no-op, as on Rucio
                    Catalog.attach(con, ds, did)
                    row = Catalog.get(con, did)
                    old = row.meta if row else {}
                    if meta or (lay and old.get("layout") != lay):  # (a record added later)
                        Catalog.set_meta(con, did, {**old, **mine})
                    continue
                final = self.path_for(did)
                final.parent.mkdir(parents=True, exist_ok=True)
                os.replace(tmp, final)
                placed.append(final)
                Catalog.add(con, did, "file", bytes_=size, adler32=adler,
                            path=str(final.relative_to(self.root)), meta=mine)
                Catalog.attach(con, ds, did)
        except BaseException:
            for p in placed:  # the transaction rolls back; take the new files back too
                p.unlink(missing_ok=True)
            raise

    def _check_existing(self, con: sqlite3.Connection, did: DID, size: int, adler: str) -> bool:
        """True if ``did`` exists with these bytes (a no-op upload); DataError if it differs."""
        row = Catalog.get(con, did)
        if row is None:
            return False
        if row.type != "file":
            raise DataError(f"{did} already exists as a {row.type}",
                            hint="choose another file name (--names) or another dataset")
        if (row.bytes, row.adler32) != (size, adler):
            raise DataError(
                f"{did} already exists with different content (adler32 {row.adler32}, "
                f"{row.bytes} bytes; new file: {adler}, {size} bytes)",
                hint="a DID is immutable: upload the new version under a new name")
        return True

    def _ensure_collection(self, did: DID, type_: str, meta: dict[str, Any] | None) -> None:
        with self.catalog.write() as con:
            _ensure_collection(con, did, type_, meta)

    def path_for(self, did: DID) -> Path:
        """Where the file ``did`` lives: <root>/<scope>/<h0h1>/<h2h3>/<name> (md5 of scope:name)."""
        h = hashlib.md5(str(did).encode()).hexdigest()
        path = (self.root / did.scope / h[:2] / h[2:4] / did.name).resolve()
        if self.root not in path.parents:  # parse_did already refuses this; belt and braces
            raise DataError(f"{did} would be stored outside {self.root}", hint="rename the DID")
        return path

    def _get(self, did: DID) -> Row:
        with self.catalog.read() as con:
            row = Catalog.get(con, did)
        if row is None:
            raise not_found(did, self.where)
        return row

    def _info(self, row: Row) -> FileInfo:
        return FileInfo(row.did, row.bytes or 0, row.adler32 or "", self.root / (row.path or ""),
                        [RSE], dict(row.meta))


def _is_file_of(path: Path, size: int) -> bool:
    """Whether ``path`` is a regular file (symlinks followed) of ``size`` bytes."""
    try:
        st = os.stat(path)
    except OSError:
        return False
    return stat.S_ISREG(st.st_mode) and st.st_size == size


def _layout(path: Path) -> dict[str, Any] | None:
    """The layout record of an HDF5 file (payloads/runtime/pipeline/layouts.py: what a trial's
    start checks, so that it need not open the file), None for any other file (the signature
    is looked at first: no h5py import for a model or a figure)."""
    try:
        with open(path, "rb") as f:
            if f.read(8) != HDF5_SIGNATURE:
                return None
    except OSError:
        return None
    return make_record(path)


def _ensure_collection(con: sqlite3.Connection, did: DID, type_: str,
                       meta: dict[str, Any] | None) -> None:
    """Create dataset/container ``did`` unless it exists as one; merge ``meta`` into it."""
    row = Catalog.get(con, did)
    if row is None:
        Catalog.add(con, did, type_, meta=meta)
    elif row.type != type_:
        raise DataError(f"{did} already exists as a {row.type}, not a {type_}",
                        hint=f"choose another name for the {type_}")
    elif meta:
        Catalog.set_meta(con, did, {**row.meta, **meta})


def _files_under(con: sqlite3.Connection, row: Row) -> list[Row]:
    """Files of a DID, recursively, each once, in a stable order."""
    if row.type == "file":
        return [row]
    seen: dict[DID, Row] = {}
    for kid in Catalog.children(con, row.did):
        for f in _files_under(con, kid):
            seen.setdefault(f.did, f)
    return list(seen.values())


def _collections_under(con: sqlite3.Connection, row: Row) -> list[Row]:
    """``row`` and every dataset/container below it."""
    out = [row]
    for kid in Catalog.children(con, row.did):
        if kid.type != "file":
            out.extend(_collections_under(con, kid))
    return out
