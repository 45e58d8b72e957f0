"""The output folder's light side: its lock, its manifest, and whether it is up to date.

Writing shards and committing them is in :mod:`gridml.prepare.commit` (imported only when there
is work, so an up-to-date re-run never imports numpy or h5py).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from gridml.errors import UsageError
from gridml.prepare.spec import PrepSpec

MANIFEST = "manifest.json"
NORM = "norm.json"


@contextmanager
def locked(out_dir: Path) -> Iterator[None]:
    """One `gridml prepare` at a time per output folder (an flock, released on exit or crash)."""
    import fcntl

    out_dir.mkdir(parents=True, exist_ok=True)
    with open(out_dir / ".lock", "a") as fh:  # "a": no truncation, the mtime stays
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise UsageError(f"another `gridml prepare` is writing to {out_dir}",
                             hint="wait for it to finish, or give this spec another output.dir"
                             ) from None
        yield


def read_manifest(out_dir: Path) -> dict[str, Any] | None:
    try:
        return json.loads((out_dir / MANIFEST).read_text())
    except (OSError, ValueError):
        return None


def shard_settings(spec: PrepSpec) -> dict[str, Any]:
    """How shards are written (a change rewrites them, but reuses every cached piece): the
    output settings, and with samples their weight factors (scale, xsec, lumi)."""
    out = spec.model.output.model_dump(include={"shard_size", "compression", "level", "normalize"})
    if spec.model.samples:
        out["weights"] = {name: s.model_dump(include={"scale", "xsec", "lumi"})
                          for name, s in spec.model.samples.items()}
    return out


def present(out_dir: Path, shard: dict[str, Any]) -> bool:
    path = out_dir / shard["name"]
    return path.is_file() and path.stat().st_size == shard["bytes"]


def unchanged(previous: dict[str, Any] | None, out_dir: Path, keys: list[str],
              settings: dict[str, Any]) -> bool:
    """True when the last run used the same chunks and settings and its shards are intact."""
    return (previous is not None and previous.get("chunks", {}).get("keys") == keys
            and previous.get("shard_settings") == settings
            and all(present(out_dir, s) for s in previous.get("shards", [])))


def save_json(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data, indent=1))
    os.replace(tmp, path)


def save_manifest(out_dir: Path, manifest: dict[str, Any]) -> None:
    save_json(out_dir / MANIFEST, manifest)
