"""Pieces every DataManager backend shares: the same errors, name checks and verified copies."""

from __future__ import annotations

import os
import re
import shutil
import uuid
from pathlib import Path

from gridml.data.base import _SCOPE, DID, adler32_file, parse_did
from gridml.errors import ChecksumError, DataError, NotFoundError

_PATTERN = re.compile(r"^[A-Za-z0-9._+*?-]{1,250}$")


def not_found(did: DID, where: str) -> NotFoundError:
    """The one "unknown DID" error: names the DID, where we looked, and the fix."""
    return NotFoundError(
        f"DID {did} not found in {where}",
        hint=f"see what exists with `gridml data ls '{did.scope}:*'`; add files with "
             f"`gridml data put FILE... --dataset {did}`")


def empty_error(did: DID, type_: str) -> DataError:
    return DataError(f"{type_} {did} is empty: it has no files",
                     hint=f"add files with `gridml data put FILE... --dataset {did}`, "
                          "or name another DID")


def check_names(files: list[Path], names: list[str] | None, dataset: DID) -> list[str]:
    """The file names to upload under (``names`` or the files' own names), each a valid DID name."""
    if names is not None and len(names) != len(files):
        raise DataError(f"{len(files)} files but {len(names)} names for {dataset}",
                        hint="give one name per file, or none to use the file names")
    chosen = list(names) if names is not None else [Path(f).name for f in files]
    for n in chosen:
        parse_did(f"{dataset.scope}:{n}")
    dupes = sorted({n for n in chosen if chosen.count(n) > 1})
    if dupes:
        raise DataError(f"the same name twice in one upload to {dataset}: {', '.join(dupes)}",
                        hint="file names become DIDs in the dataset's scope: make them unique")
    return chosen


def resolve_pattern(scope: str, pattern: str) -> tuple[str, str]:
    """Check a ``scope`` and a name ``pattern`` (``*``/``?`` wildcards) for listing."""
    if not re.fullmatch(_SCOPE, scope or "") or not _PATTERN.fullmatch(pattern or "") \
            or ".." in pattern:
        raise DataError(f"malformed DID pattern {scope}:{pattern}",
                        hint="write scope:pattern, e.g. 'user.jdoe:*' or 'user.jdoe:higgs.*'")
    return scope, pattern


def copy_verified(src: Path, dst: Path, adler32: str, size: int, label: str) -> Path:
    """Copy ``src`` to ``dst`` atomically and check its adler32; keep ``dst`` if already right."""
    if is_verified(dst, adler32, size):
        return dst
    tmp = dst.with_name(f".{dst.name}.{uuid.uuid4().hex[:8]}.part")
    try:
        shutil.copyfile(src, tmp)
        got = adler32_file(tmp)
        if got != adler32:
            raise ChecksumError(f"{label}: copy has adler32 {got}, the catalogue says {adler32}",
                                hint="the stored file is corrupt: upload it again under a new name")
        os.replace(tmp, dst)
    finally:
        tmp.unlink(missing_ok=True)
    return dst


def is_verified(path: Path, adler32: str, size: int) -> bool:
    """True if ``path`` is a file with this size and adler32 (cheap size check first)."""
    return path.is_file() and path.stat().st_size == size and adler32_file(path) == adler32
