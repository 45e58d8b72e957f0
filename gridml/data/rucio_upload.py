"""Uploading a batch of files into a Rucio dataset (the rules are in gridml.data.rucio's docstring).

1. check the whole batch first: names, readable files, DIDs that exist (same adler32: no-op;
   other adler32: refused) -- nothing is written on a user mistake;
2. create the dataset (with its rule on the upload RSE) if missing;
3. the new files: rucio's UploadClient with ``register_after_upload`` (copy, verify, then register
   and attach each), retried with backoff on transient failures for the files not yet registered;
4. attach the no-op files that are not in the dataset yet; set metadata.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol, TypeVar

from gridml.data.base import DID, FileInfo, adler32_file
from gridml.data.common import check_names
from gridml.data.rucio_errors import RucioLog
from gridml.errors import DataError, NotFoundError

T = TypeVar("T")


class RucioStore(Protocol):
    """What an upload needs of :class:`gridml.data.rucio.RucioStore` (its public side)."""

    client: Any

    @property
    def where(self) -> str: ...

    def call(self, fn: Callable[[], T], action: str, did: DID | str | None = None) -> T: ...
    def set_meta(self, d: DID, metadata: dict[str, Any]) -> None: ...
    def add_dataset(self, did: str, *, metadata: dict[str, Any] | None = None,
                    rse: str | None = None) -> Any: ...

_Local = tuple[Path, int, str]  # path, bytes, adler32


def upload_batch(store: RucioStore, files: list[Path], ds: DID, *, names: list[str] | None,
                 rse: str, metadata: dict[str, Any]) -> list[FileInfo]:
    dids = [DID(ds.scope, n) for n in check_names(files, names, ds)]
    local = [_local_facts(f) for f in files]
    new = [(d, f) for d, f in zip(dids, local, strict=True) if not _exists_same(store, d, f)]
    store.add_dataset(str(ds), rse=rse)
    _upload_new(store, new, ds, rse)
    _attach_missing(store, ds, dids)
    if metadata:
        for did in dids:
            store.set_meta(did, metadata)
    return [FileInfo(d, size, adler, path=p, replicas=[rse]) for d, (p, size, adler) in
            zip(dids, local, strict=True)]


def _local_facts(path: Path) -> _Local:
    if not path.is_file():
        raise DataError(f"cannot upload {path}: not a file",
                        hint="give paths of existing regular files")
    return path, path.stat().st_size, adler32_file(path)


def _exists_same(store: RucioStore, did: DID, facts: _Local) -> bool:
    """True if ``did`` exists with these bytes (no-op); DataError if it exists otherwise."""
    try:
        meta = store.call(lambda: store.client.get_metadata(did.scope, did.name), "look up", did)
    except NotFoundError:
        return False
    _, size, adler = facts
    if str(meta.get("did_type", "FILE")).upper() != "FILE":
        raise DataError(f"{did} already exists as a {str(meta['did_type']).lower()}",
                        hint="choose another file name or another dataset")
    theirs = (int(meta.get("bytes") or -1), str(meta.get("adler32") or "").lower().zfill(8))
    if theirs != (size, adler):
        raise DataError(f"{did} already exists on {store.where} with different content "
                        f"(adler32 {theirs[1]}, {theirs[0]} bytes; "
                        f"new file: {adler}, {size} bytes)",
                        hint="a DID is immutable: upload the new version under a new name")
    return True


def _upload_new(store: RucioStore, new: list[tuple[DID, _Local]], ds: DID, rse: str) -> None:
    """Copy-then-register every new file with one UploadClient; after a failure, retry only the
    files not registered yet (transient failures, with backoff)."""
    from rucio.client.uploadclient import UploadClient  # rucio-clients: only when uploading

    pending = dict(new)

    def attempt() -> None:
        items = [{"path": str(p), "rse": rse, "did_scope": d.scope, "did_name": d.name,
                  "dataset_scope": ds.scope, "dataset_name": ds.name,
                  "register_after_upload": True} for d, (p, _, _) in pending.items()]
        try:
            UploadClient(store.client, logger=RucioLog(), tracing=False).upload(items)
        except Exception as exc:
            # NoFilesUploaded also covers "copied and registered, but attaching failed" (e.g. the
            # server went away for a moment): the registrations, not the exception, decide.
            for did in [d for d, (_, size, adler) in pending.items()
                        if _registered(store, d, size, adler)]:
                del pending[did]
            if pending or type(exc).__name__ not in ("NoFilesUploaded", "NotAllFilesUploaded"):
                raise
        pending.clear()

    if pending:
        store.call(attempt, "upload into", ds)


def _registered(store: RucioStore, did: DID, size: int, adler: str) -> bool:
    """``did`` is registered with these bytes (raw client call: the caller retries)."""
    try:
        meta = store.client.get_metadata(did.scope, did.name)
    except Exception as exc:
        if type(exc).__name__ == "DataIdentifierNotFound":
            return False
        raise
    return (int(meta.get("bytes") or -1), str(meta.get("adler32") or "").lower().zfill(8)) \
        == (size, adler)


def _attach_missing(store: RucioStore, ds: DID, dids: list[DID]) -> None:
    have = {(r["scope"], r["name"]) for r in store.call(
        lambda: list(store.client.list_content(ds.scope, ds.name)), "list", ds)}
    todo = [{"scope": d.scope, "name": d.name} for d in dids if (d.scope, d.name) not in have]
    if todo:
        store.call(lambda: store.client.attach_dids(ds.scope, ds.name, todo), "attach to", ds)
