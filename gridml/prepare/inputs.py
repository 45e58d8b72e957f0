"""Input files: where they are (paths, DIDs), what they hold, their content hash, their chunks.

Content hashes (BLAKE2b-256, plus Rucio's adler32) are remembered per (path, size, mtime, inode)
in ``<cache>/files.json`` - the way git, make and DVC avoid re-reading unchanged files - so a
re-run with nothing changed opens no input at all. ``--rehash`` ignores that memory.
"""

from __future__ import annotations

import hashlib
import json
import os
import zlib
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from gridml.errors import DataError, SpecError
from gridml.prepare import readers


@dataclass
class InputFile:
    path: Path
    source: str  # the path as given, or the DID it came from
    kind: str  # root | hdf5
    digest: str  # blake2b-256 of the file's bytes
    adler32: str
    bytes: int
    entries: int
    schema: dict[str, str]
    sample: str = ""  # the sample it belongs to ("" for a spec without samples)


@dataclass(frozen=True)
class Chunk:
    file: int  # index into the input list
    index: int  # chunk number within the file
    start: int
    stop: int


def hash_file(path: Path, bufsize: int = 1 << 20) -> tuple[str, str]:
    """(blake2b-256 hex, adler32 hex) of a file, in one pass."""
    blake, adler = hashlib.blake2b(digest_size=32), 1
    with open(path, "rb") as fh:
        while block := fh.read(bufsize):
            blake.update(block)
            adler = zlib.adler32(block, adler)
    return blake.hexdigest(), f"{adler & 0xFFFFFFFF:08x}"


class FileMemo:
    """Remembers content hashes, entries and schema of files that did not change on disk."""

    def __init__(self, path: Path, *, rehash: bool = False) -> None:
        self.path = path
        self.rehash = rehash
        try:
            self.data: dict[str, Any] = json.loads(path.read_text())
        except (OSError, ValueError):
            self.data = {}
        self.dirty = False

    def _key(self, path: Path, kind: str, tree: str) -> tuple[str, list[int]]:
        st = path.stat()
        return f"{path}|{kind}|{tree}", [st.st_size, st.st_mtime_ns, st.st_ino]

    def missing(self, path: Path, kind: str, tree: str) -> bool:
        """True when the file must be (re-)read and hashed."""
        key, stamp = self._key(path, kind, tree)
        return self.rehash or self.data.get(key, {}).get("stamp") != stamp

    def store(self, path: Path, kind: str, tree: str, facts: dict[str, Any]) -> None:
        """Remember what :func:`examine` found (the stamp is taken before it ran)."""
        key, _ = self._key(path, kind, tree)
        self.data[key], self.dirty = facts, True

    def get(self, path: Path, source: str, kind: str, tree: str) -> InputFile:
        key, _ = self._key(path, kind, tree)
        hit = self.data[key]
        return InputFile(path=path, source=source, kind=kind, digest=hit["digest"],
                         adler32=hit["adler32"], bytes=hit["stamp"][0], entries=hit["entries"],
                         schema=hit["schema"])

    def save(self) -> None:
        if self.dirty:
            tmp = self.path.with_suffix(".tmp")
            tmp.write_text(json.dumps(self.data))
            os.replace(tmp, self.path)


def examine(task: tuple[str, str, str]) -> dict[str, Any]:
    """Entries, schema and content hashes of one file (runs in a worker) or {"error": ...}."""
    path, kind, tree = Path(task[0]), task[1], task[2]
    st = path.stat()
    try:
        entries, schema = readers.describe(path, kind, tree)
    except DataError as exc:
        return {"error": str(exc)}
    digest, adler = hash_file(path)
    return {"path": str(path), "stamp": [st.st_size, st.st_mtime_ns, st.st_ino],
            "digest": digest, "adler32": adler, "entries": entries, "schema": schema}


def stage_dids(dids: list[str], backend: str, dest: Path) -> list[tuple[Path, str]]:
    """Stage DIDs in through the data backend -> [(local path, DID of the file)]."""
    if not dids:
        return []
    from gridml.data import open_data_manager  # lazy: only specs with DIDs need the data layer

    manager = open_data_manager(backend)
    staged: list[tuple[Path, str]] = []
    for did in dids:
        dest.mkdir(parents=True, exist_ok=True)
        for info in manager.stage_in(did, dest):
            if info.path is None:
                raise DataError(f"{did}: file {info.did} was not staged in",
                                hint="check the data backend and retry")
            staged.append((Path(info.path), str(info.did)))
    return sorted(staged, key=lambda item: item[1])


def describe_all(files: list[tuple[Path, str]], fmt: str, tree: str, memo: FileMemo,
                 pool: Any) -> list[InputFile]:
    """Describe every input: unchanged files from the memo, the others examined over the pool;
    an unreadable file -> DataError naming it."""
    kinds = [readers.kind_of(path, fmt) for path, _ in files]
    todo = [(str(p), k, tree) for (p, _), k in zip(files, kinds) if memo.missing(p, k, tree)]
    if len(todo) > 1:
        pool.start()
    for facts in pool.run(examine, todo):
        if "error" in facts:
            raise DataError(facts["error"])
        path = Path(facts.pop("path"))
        memo.store(path, readers.kind_of(path, fmt), tree, facts)
    return [memo.get(path, source, kind, tree) for (path, source), kind in zip(files, kinds)]


def check_schema(inputs: list[InputFile], branches: list[str] | None,
                 required: list[str], sample: str = "") -> list[str]:
    """The columns read (``branches``, or all of the first file's) plus ``required`` must exist
    with the same type in every file (of one sample); else SpecError naming the files."""
    if not inputs:
        raise DataError(f"sample {sample}: no input files" if sample else "no input files",
                        hint=f"check samples.{sample}.files / dids in the spec" if sample
                        else "check inputs.files / inputs.dids in the spec")
    first = inputs[0]
    wanted = list(dict.fromkeys((branches or sorted(first.schema)) + required))
    fix = (f"fix samples.{sample} (branches, weight_branch), features.branches, collections "
           "or split.key" if sample else "fix inputs.branches / split.key")
    problems = [f"{first.source}: column {col!r} not found (it has {sorted(first.schema)}); "
                f"{fix}" for col in wanted if col not in first.schema]
    for f in inputs[1:]:
        for col in wanted:
            if col in first.schema and col not in f.schema:
                problems.append(f"{f.source}: schema mismatch: column {col!r} missing "
                                f"(present in {first.source}); fix the file or drop it from "
                                "inputs.branches")
            elif col in first.schema and f.schema[col] != first.schema[col]:
                problems.append(f"{f.source}: schema mismatch: column {col!r} is "
                                f"{f.schema[col]} but {first.schema[col]} in {first.source}; "
                                "make the files agree")
        if f.kind != first.kind:
            problems.append(f"{f.source}: is {f.kind} but {first.source} is {first.kind}; "
                            "prepare one format at a time")
    if problems:
        raise SpecError(problems)
    return wanted


def plan_chunks(inputs: list[InputFile], chunk_size: int) -> list[Chunk]:
    """Every file cut into chunks of ``chunk_size`` events, in input order."""
    chunks = []
    for i, f in enumerate(inputs):
        for k, start in enumerate(range(0, f.entries, chunk_size)):
            chunks.append(Chunk(i, k, start, min(start + chunk_size, f.entries)))
    return chunks


def manifest_entry(f: InputFile) -> dict[str, Any]:
    """How an input is recorded in manifest.json."""
    entry = asdict(f)
    entry["path"] = str(f.path)
    entry["blake2b"] = entry.pop("digest")
    return entry
