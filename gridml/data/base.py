"""The DataManager seam: DIDs, datasets, stage-in, upload, download.

A DID is ``scope:name`` as in Rucio. A *file* DID names one file; a *dataset* DID names a set of
files; a *container* names datasets. Backends: ``local`` (a directory store under
$GRIDML_HOME/store with a SQLite catalogue; the embedded default) and ``rucio`` (rucio-clients).
``gridml.data.open_data_manager(name)`` is the one place that chooses.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from gridml.errors import DataError

# Rucio's default naming convention (scope and name), strict enough to refuse path tricks.
_SCOPE = r"[A-Za-z0-9][A-Za-z0-9._-]{0,29}"
_NAME = r"[A-Za-z0-9][A-Za-z0-9._+-]{0,249}"
DID_RE = re.compile(rf"^(?P<scope>{_SCOPE}):(?P<name>{_NAME})$")


@dataclass(frozen=True)
class DID:
    scope: str
    name: str

    def __str__(self) -> str:
        return f"{self.scope}:{self.name}"


def parse_did(text: str) -> DID:
    """``scope:name`` -> DID; refuses malformed DIDs and path traversal with a clear error."""
    m = DID_RE.fullmatch(text or "")  # fullmatch: "$" alone would let "a:b\n" through
    if not m or ".." in text or "/" in text:
        raise DataError(
            f"malformed DID {text!r}",
            hint="write it as scope:name, e.g. user.jdoe:higgs.train, letters/digits/._- only",
        )
    return DID(m["scope"], m["name"])


@dataclass
class FileInfo:
    did: DID
    bytes: int
    adler32: str  # 8 lowercase hex digits
    path: Path | None = None  # where it is on this machine (local store / after stage-in)
    replicas: list[str] = field(default_factory=list)  # RSEs or URLs
    metadata: dict[str, Any] = field(default_factory=dict)


class DataManager(Protocol):
    name: str

    def resolve(self, did: str) -> list[FileInfo]: ...
    # file, dataset or container -> its files (with replicas); NotFoundError / DataError if the
    # DID does not exist, is empty, or has no available replica.
    def stage_in(self, did: str, dest: Path) -> list[FileInfo]: ...
    # download (checksum-verified; files already present and verified are reused) -> local paths
    def upload(self, files: list[Path], dataset: str, *, metadata: dict[str, Any] | None = None,
               names: list[str] | None = None, rse: str | None = None) -> list[FileInfo]: ...
    # upload files into dataset (created if missing), named names[i] or the file name, as DIDs in
    # the dataset's scope; metadata is set on each file; rse None = the backend's default RSE.
    # All or nothing; same name + same adler32 = no-op; same name + other content = DataError.
    def list_files(self, did: str) -> list[FileInfo]: ...
    def download(self, did: str, dest: Path) -> list[Path]: ...
    def set_metadata(self, did: str, metadata: dict[str, Any]) -> None: ...
    def get_metadata(self, did: str) -> dict[str, Any]: ...
    def exists(self, did: str) -> bool: ...
    # Listing and collections (``gridml data ls``, containers of datasets):
    def did_type(self, did: str) -> str: ...  # "file" | "dataset" | "container"; NotFoundError
    def list_dids(self, scope: str, pattern: str = "*") -> list[tuple[DID, str]]: ...
    # (DID, type) of the DIDs in scope whose name matches pattern (* and ? wildcards)
    def add_dataset(self, did: str, *, metadata: dict[str, Any] | None = None) -> None: ...
    def add_container(self, did: str, children: list[str]) -> None: ...
    @property
    def where(self) -> str: ...  # "the local store /x" | "Rucio at URL (account A)": for messages


def adler32_file(path: Path, bufsize: int = 1 << 20) -> str:
    """Rucio's checksum: adler32 as 8 lowercase hex digits."""
    import zlib

    value = 1
    with open(path, "rb") as fh:
        while chunk := fh.read(bufsize):
            value = zlib.adler32(chunk, value)
    return f"{value & 0xFFFFFFFF:08x}"
