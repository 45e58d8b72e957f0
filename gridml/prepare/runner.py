"""``run_prepare``: spec -> inputs -> cached pieces (parallel) -> shards (parallel) -> manifest.

Stages: (1) describe the inputs (content hashes remembered while files are unchanged), cut them
into chunks and key each chunk by (input content, range, code, config); (2) process the chunks
whose piece is not in the cache, over the pool; (3) cut the pieces into shards and write those
whose identity changed; (4) commit: rename new shards into place, drop stale ones, write norm.json
and manifest.json (each atomically); (5) optionally register one dataset per split.
Nothing is renamed into the output folder, and nothing registered, unless every step succeeded.
"""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path
from typing import Any

from gridml.errors import DataError
from gridml.prepare import inputs as inp
from gridml.prepare import output
from gridml.prepare.pool import Pool
from gridml.prepare.register import register
from gridml.prepare.result import PrepareResult, required_branches
from gridml.prepare.spec import PrepSpec, load_prep_spec
from gridml.settings import settings

FORMAT_VERSION = "1"  # bump when pieces or shards change meaning: invalidates every cache key


def cache_root(explicit: Path | None) -> Path:
    """$GRIDML_HOME/cache/prepare, unless given."""
    if explicit is None:

        explicit = settings().home / "cache" / "prepare"
    explicit.mkdir(parents=True, exist_ok=True)
    return explicit


def code_hash(spec: PrepSpec) -> str:
    """Hash of the preprocessing code: the module, its declared neighbours, gridml's format."""
    h = hashlib.sha256(f"gridml-prepare/{FORMAT_VERSION}".encode())
    for path in [spec.module_path, *spec.depends]:
        if path is not None:  # no function: the hash of gridml's format alone
            h.update(path.read_bytes())
    return h.hexdigest()[:24]


def _hash(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:24]


def _describe(spec: PrepSpec, cache: Path, backend: str, rehash: bool,
              pool: Pool) -> list[inp.InputFile]:
    """Every input of every sample (DIDs staged in), described (changed files over the pool),
    schema-checked per sample: only what the spec asks of a sample must exist in its files."""
    m = spec.model
    memo = inp.FileMemo(cache / "files.json", rehash=rehash)
    described: list[inp.InputFile] = []
    for sample in spec.samples:
        files = [(p, str(p)) for p in sample.files]
        files += inp.stage_dids(sample.dids, backend, cache / "staged")
        found = inp.describe_all(files, m.inputs.format, sample.tree, memo, pool)
        inp.check_schema(found, sample.branches, required_branches(spec, sample), sample.name)
        for f in found:
            f.sample = sample.name
        described += found
    memo.save()
    return described


def run_prepare(spec_path: str | Path, *, jobs: int = 0, dataset: str | None = None,
                backend: str | None = None, cache_dir: Path | None = None, rehash: bool = False,
                force: bool = False, show_progress: bool = True) -> PrepareResult:
    """Prepare the shards a prepare spec describes (see the module docstring)."""

    t0 = time.perf_counter()
    spec = load_prep_spec(spec_path)
    backend = backend or spec.model.backend or settings().data_backend
    dataset = dataset or spec.model.output.dataset
    cache = cache_root(cache_dir)
    with output.locked(spec.out_dir), Pool(jobs) as pool:  # workers start only if needed
        files = _describe(spec, cache, backend, rehash, pool)
        t_inputs = time.perf_counter() - t0
        result = _plan_and_build(spec, pool, files, cache, force, show_progress)
        result.timings = {"inputs": t_inputs, **result.timings}
        if dataset:

            result.datasets = register(spec.out_dir, result.manifest, dataset, backend)
    result.seconds = time.perf_counter() - t0
    return result


def _plan_and_build(spec: PrepSpec, pool: Pool, files: list[inp.InputFile], cache: Path,
                    force: bool, show: bool) -> PrepareResult:
    """Key every chunk; do nothing when the last run had the same keys, else build."""
    chunks = inp.plan_chunks(files, spec.model.inputs.chunk_size)
    if not chunks:
        raise DataError(f"{spec.path}: the inputs hold no events", hint="check inputs.files/dids")
    ident = [code_hash(spec), _hash(spec.config())]
    keys = [_hash([files[c.file].digest, c.start, c.stop, *ident]
                  + ([files[c.file].sample] if files[c.file].sample else [])) for c in chunks]
    result = PrepareResult(out_dir=spec.out_dir, manifest={}, chunks=len(chunks),
                           events=sum(c.stop - c.start for c in chunks))
    previous = output.read_manifest(spec.out_dir)
    if not force and output.unchanged(previous, spec.out_dir, keys, output.shard_settings(spec)):
        result.up_to_date, result.manifest = True, previous or {}
    else:
        from gridml.prepare.build import build  # heavy imports only when there is work

        build(spec, pool, files, chunks, keys, ident, cache, previous, force, show, result)
    return result


