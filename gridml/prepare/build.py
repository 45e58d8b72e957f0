"""Building the output when something changed: process the uncached chunks over the pool,
then write and commit the shards (numpy, awkward, uproot and h5py are needed from here on)."""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any

from gridml.prepare import commit, worker
from gridml.prepare import inputs as inp
from gridml.prepare.pool import Pool, progress
from gridml.prepare.result import PrepareError, PrepareResult, read_branches
from gridml.prepare.spec import PrepSpec


def _tasks(spec: PrepSpec, files: list[inp.InputFile], chunks: list[inp.Chunk], keys: list[str],
           cache: Path, code: str) -> list[worker.ChunkTask]:
    m = spec.model
    pad = {k: v.model_dump() for k, v in m.features.pad.items()}
    samples = {s.name: s for s in spec.samples}
    collections = tuple((name, c.model_dump()) for name, c in m.collections.items())
    pre = m.preprocess
    tasks = []
    for c, k in zip(chunks, keys):
        f = files[c.file]
        smp = samples[f.sample]
        tasks.append(worker.ChunkTask(
            key=k, path=str(f.path), source=f.source, kind=f.kind, tree=smp.tree,
            branches=read_branches(spec, smp, f.schema), chunk=c.index, start=c.start,
            stop=c.stop, digest=f.digest, module=str(spec.module_path or ""), code=code,
            function=pre.function if pre else "", params=pre.params if pre else {}, pad=pad,
            ragged=m.features.ragged, splits=list(m.split.fractions),
            fractions=list(m.split.fractions.values()), split_key=m.split.key,
            seed=m.split.seed, cache=str(cache), sample=smp.name, label=smp.label,
            weights=spec.explicit_samples, weight_branch=smp.weight_branch,
            feature_branches=tuple(m.features.branches), collections=collections))
    return tasks


def _compute(pool: Pool, todo: list[worker.ChunkTask], show: bool) -> list[dict[str, Any]]:
    """Process the uncached chunks; the first failure stops everything with file/chunk/reason."""
    results = []
    with progress(show) as bar:
        tid = bar.add_task("preprocess", total=sum(t.stop - t.start for t in todo), unit="events")
        for res in pool.run(worker.process, todo):
            if "error" in res:
                raise PrepareError(f"{res['source']}: chunk {res['chunk']} (events "
                                   f"{res['start']}-{res['stop']}): {res['error']}",
                                   hint="fix it and re-run; finished chunks stay cached")
            results.append(res)
            bar.update(tid, advance=res["events"])
    return results


def build(spec: PrepSpec, pool: Pool, files: list[inp.InputFile], chunks: list[inp.Chunk],
           keys: list[str], ident: list[str], cache: Path, previous: dict[str, Any] | None,
           force: bool, show: bool, result: PrepareResult) -> None:
    tasks = _tasks(spec, files, chunks, keys, cache, ident[0])
    summaries = {} if force else {k: s for k in keys if (s := worker.read_summary(cache, k))}
    todo = [t for t in tasks if t.key not in summaries]
    if todo or len(keys) > 1:
        pool.start()
    t0 = time.perf_counter()
    for res in _compute(pool, todo, show):
        summaries[res["key"]] = res
    result.timings["chunks"] = time.perf_counter() - t0
    result.chunks_computed = len(todo)
    result.events_computed = sum(t.stop - t.start for t in todo)
    by_file: list[list[dict[str, Any]]] = [[] for _ in files]
    for c, k in zip(chunks, keys):
        by_file[c.file].append(summaries[k])
    staging = spec.out_dir / ".partial"
    try:
        result.manifest, result.shards_written = commit.write_all(
            spec, pool, files, by_file, keys, ident, cache, previous, staging, show,
            reuse=not force)
        result.timings["shards"] = time.perf_counter() - t0 - result.timings["chunks"]
    finally:
        shutil.rmtree(staging, ignore_errors=True)
