"""The user's code as a PanDA sandbox: packed, named by its content, uploaded to the PanDA cache.

prun and phpo ship the user's files as a tarball in PanDA's cache (``Client.putFile``; jobs get
it from ``<sourceURL>/cache/<name>``, named in the job parameters as ``-a <name>``). gridml does
the same on both PanDA paths (``executor: panda`` and ``phpo``): the sandbox holds the files
``payload.files`` names (relative to the spec's folder; checked at submit) or, without that list,
the model's folder (regular files, no hidden ones, no ``__pycache__``), plus gridml's own extra
files (phpo: ``gridml_trial.json``). The tarball is reproducible (sorted, mtime 0, owner 0), so
its name ``jobO.gridml-<sha256[:16]>.tar.gz`` is known before the upload (the dry run shows it)
and a resubmission uploads nothing new (panda-client's ``reuseSandbox`` check).
"""

from __future__ import annotations

import gzip
import hashlib
import io
import tarfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from gridml.errors import ExecutorError

MAX_BYTES = 10 * 1024 * 1024  # panda-client's limit for files not named sources.* (NO_BUILD_LIMIT)


@dataclass(frozen=True)
class Sandbox:
    name: str  # the cache file name (jobO.gridml-<hash>.tar.gz)
    data: bytes  # the tarball
    members: tuple[str, ...]

    def write(self, folder: Path) -> Path:
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / self.name
        if not path.is_file() or path.read_bytes() != self.data:
            path.write_bytes(self.data)
        return path


def sandbox_files(model: Path, files: Sequence[str] | None, base: Path) -> list[tuple[Path, str]]:
    """(path, name in the tarball) of the user's files: ``payload.files`` relative to ``base``,
    else the model's folder. The model file is always in, at the top of the tarball."""
    out: dict[str, Path] = {}
    if files:
        for name in files:
            path = (base / name) if not Path(name).is_absolute() else Path(name)
            if not path.is_file():
                raise ExecutorError(f"payload.files: {name} is not a file (relative to {base})",
                                    hint="list existing files, relative to the spec's folder")
            arc = Path(name).name if Path(name).is_absolute() else Path(name).as_posix()
            if arc.startswith("../"):
                raise ExecutorError(f"payload.files: {name} is outside the spec's folder",
                                    hint="list files in or below the spec's folder")
            out[arc] = path
    else:
        for path in sorted(model.parent.rglob("*")):
            rel = path.relative_to(model.parent)
            if path.is_file() and not any(p.startswith(".") or p == "__pycache__" for p in rel.parts):
                out[rel.as_posix()] = path
    out.setdefault(model.name, model)
    return [(out[k], k) for k in sorted(out)]


def pack(entries: Sequence[tuple[Path, str]], extra: dict[str, bytes] | None = None) -> Sandbox:
    """The reproducible tarball of ``entries`` and ``extra`` (name -> bytes)."""
    blobs = {arc: path.read_bytes() for path, arc in entries}
    blobs.update(extra or {})
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for arc in sorted(blobs):
            info = tarfile.TarInfo(arc)
            info.size, info.mtime, info.mode = len(blobs[arc]), 0, 0o644
            tar.addfile(info, io.BytesIO(blobs[arc]))
    data = gzip.compress(raw.getvalue(), mtime=0)
    if len(data) > MAX_BYTES:
        raise ExecutorError(f"the sandbox is {len(data)} bytes, over PanDA's cache limit of "
                            f"{MAX_BYTES} bytes", hint="list only code in payload.files; put "
                            "data in datasets and big dependencies in the container image")
    name = f"jobO.gridml-{hashlib.sha256(data).hexdigest()[:16]}.tar.gz"
    return Sandbox(name, data, tuple(sorted(blobs)))


def sandbox_for(model: Path, files: Sequence[str] | None, base: Path,
                extra: dict[str, bytes] | None = None) -> Sandbox:
    return pack(sandbox_files(model, files, base), extra)
