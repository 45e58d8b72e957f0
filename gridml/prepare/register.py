"""Register prepared shards as datasets: ``<scope>:<name>.<split>`` holding that split's shards
(HDF5 only, so a training spec can name it under data.train / data.validation) and
``<scope>:<name>.meta`` holding manifest.json and norm.json.

What was registered is written to ``registered.json`` (manifest.json is left as registered).
Files are named ``<name>.<shard>`` in the store (file names are unique per scope in Rucio).
Registering the same content again does nothing; registering different content under a name
that exists is refused (datasets are immutable once used: pick a new name, e.g. ``<name>.v2``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from gridml.data.base import adler32_file, parse_did
from gridml.errors import DataError
from gridml.prepare import output


def _wanted(out_dir: Path, manifest: dict[str, Any], name: str) -> dict[str, list[tuple]]:
    """dataset suffix -> [(local path, stored name, adler32)]."""

    sets: dict[str, list[tuple]] = {}
    for rec in manifest["shards"]:
        sets.setdefault(rec["split"], []).append(
            (out_dir / rec["name"], f"{name}.{rec['name']}", rec["adler32"]))
    sets["meta"] = [(out_dir / f, f"{name}.{f}", adler32_file(out_dir / f))
                    for f in (output.MANIFEST, output.NORM)]
    return sets


def _same(manager: Any, did: str, files: list[tuple]) -> bool:
    """True when ``did`` already holds exactly these files; DataError when it holds others."""
    if not manager.exists(did):
        return False
    have = {(f.did.name, f.adler32) for f in manager.list_files(did)}
    want = {(stored, adler) for _, stored, adler in files}
    if have != want:
        raise DataError(f"dataset {did} already exists with different files "
                        f"({len(have - want)} differ or extra, {len(want - have)} new)",
                        hint="register under a new name, e.g. --dataset "
                             f"{did.rsplit('.', 1)[0]}.v2")
    return True


def register(out_dir: Path, manifest: dict[str, Any], dataset: str, backend: str) -> dict[str, str]:
    """Upload every split (and the manifest) as datasets; returns {split: DID}."""
    from gridml.data import open_data_manager  # lazy: the data layer is needed only here

    base = parse_did(dataset)
    manager = open_data_manager(backend)
    sets = _wanted(out_dir, manifest, base.name)
    meta = {"gridml_prepare": manifest["name"], "code_hash": manifest["code_hash"],
            "config_hash": manifest["config_hash"], "features": len(manifest["columns"])}
    if manifest.get("collections"):  # the channel order of every collection, for the payload
        meta["collections"] = json.dumps(manifest["collections"], sort_keys=True)
    if manifest.get("classes"):
        meta["classes"] = json.dumps(manifest["classes"])
    dids: dict[str, str] = {}
    for suffix, files in sets.items():
        did = f"{base}.{suffix}"
        parse_did(did)
        if files and not _same(manager, did, files):
            rows = manifest["splits"].get(suffix, {}).get("rows")
            manager.upload([p for p, _, _ in files], did, names=[s for _, s, _ in files],
                           metadata={**meta, "split": suffix, "rows": rows})
        dids[suffix] = did
    output.save_json(out_dir / "registered.json", {"backend": backend, "datasets": dids})
    return dids
