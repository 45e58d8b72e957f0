"""Writing the output folder: plan the shards, write the changed ones over the pool, then
commit (rename into place, drop stale shards, norm.json and manifest.json atomically)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from gridml.errors import DataError
from gridml.prepare import inputs as inp
from gridml.prepare import shards
from gridml.prepare.output import NORM, present, save_json, save_manifest, shard_settings
from gridml.prepare.pool import Pool, progress
from gridml.prepare.spec import PrepSpec


def check_consistent(summaries: list[dict[str, Any]]) -> None:
    """Every chunk must give the same columns, ragged features and weights as the first."""
    first = summaries[0]
    for s in summaries[1:]:
        for what in ("columns", "ragged", "weights"):
            if s[what] != first[what]:
                a, b = first[what], s[what]
                diff = (f"missing {sorted(set(a) - set(b))}, extra {sorted(set(b) - set(a))}"
                        if isinstance(a, list) else f"{b} vs {a}")
                raise DataError(f"{s['source']}: chunk {s['chunk']} (events {s['start']}-"
                                f"{s['stop']}): schema mismatch: its {what} differ from "
                                f"{first['source']} chunk {first['chunk']} ({diff})",
                                hint="make the function return the same features for every file")


def _attrs(spec: PrepSpec, plan: shards.ShardPlan, ident: list[str],
           samples: dict[str, dict[str, Any]], sample: str) -> dict[str, Any]:
    attrs: dict[str, Any] = {"split": plan.split, "source": plan.source, "spec": spec.model.name,
                             "code_hash": ident[0], "config_hash": ident[1], "gridml_prepare": 1}
    if sample:
        info = samples[sample]
        attrs.update(sample=sample, weight_scale=info["weight_scale"])
        if info["label"] is not None:
            attrs["label"] = info["label"]
    if spec.classes:
        attrs["classes"] = json.dumps(spec.classes)
    return attrs


def sample_weights(spec: PrepSpec, files: list[inp.InputFile],
                   by_file: list[list[dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """Per sample: its label, events, sum of generator weights and the factor every weight is
    multiplied by: ``scale``, times ``xsec * lumi / sum of generator weights`` when xsec is
    given (the sum over all its events before any selection; the event count without a
    weight_branch)."""
    out: dict[str, dict[str, Any]] = {}
    for smp in spec.samples:
        if not smp.name:
            continue
        summ = [s for f, group in zip(files, by_file) if f.sample == smp.name for s in group]
        sumw = float(sum(s.get("sumw", s["events"]) for s in summ))
        scale = smp.scale
        if smp.xsec is not None and smp.lumi is not None:
            if sumw == 0:
                raise DataError(f"sample {smp.name}: the generator weights "
                                f"({smp.weight_branch or 'event count'}) sum to 0: cannot "
                                "normalise to xsec * lumi", hint="check weight_branch")
            scale *= smp.xsec * smp.lumi / sumw
        out[smp.name] = {"label": smp.label, "files": [str(f.path) for f in files
                                                       if f.sample == smp.name],
                         "events": sum(s["events"] for s in summ), "sum_weights": sumw,
                         "scale": smp.scale, "xsec": smp.xsec, "lumi": smp.lumi,
                         "weight_branch": smp.weight_branch, "weight_scale": scale,
                         "tree": smp.tree}
    return out


def _old_shards(previous: dict[str, Any] | None, out_dir: Path) -> dict[str, dict[str, Any]]:
    old = previous.get("shards", []) if previous else []
    return {s["name"]: s for s in old if present(out_dir, s)}


def write_all(spec: PrepSpec, pool: Pool, files: list[inp.InputFile],
              by_file: list[list[dict[str, Any]]], keys: list[str], ident: list[str], cache: Path,
              previous: dict[str, Any] | None, staging: Path, show: bool,
              reuse: bool = True) -> tuple[dict, int]:
    """Plan, write (changed shards only) and commit -> (manifest, shards written)."""
    summaries = [s for group in by_file for s in group]
    check_consistent(summaries)
    m = spec.model
    splits = list(m.split.fractions)
    norm_split = "train" if "train" in splits else splits[0]
    norm = shards.norm_constants(summaries, norm_split, len(summaries[0]["columns"]))
    if m.collections:
        norm["collections"] = shards.collection_norm(summaries, norm_split,
                                                     spec.collection_info())
    samples = sample_weights(spec, files, by_file)
    settings = shard_settings(spec)
    plans = shards.plan(by_file, [f.source for f in files], splits, settings["shard_size"],
                        [f.sample for f in files])
    for p in plans:
        p.attrs = _attrs(spec, p, ident, samples, files[p.file].sample)
    shards.identify(plans, {**settings, "norm": norm if m.output.normalize == "apply" else None})
    old = _old_shards(previous, spec.out_dir) if reuse else {}
    todo = [p for p in plans if old.get(p.name, {}).get("identity") != p.identity]
    todo.sort(key=lambda p: -p.rows)  # largest first: the workers finish together
    staging.mkdir(parents=True, exist_ok=True)
    written = _write(pool, spec, todo, summaries[0], norm, cache, staging, show)
    records = [written.get(p.name) or old[p.name] for p in plans]
    for p, rec in zip(plans, records):
        rec.update(split=p.split, source=p.source, identity=p.identity)
    manifest = _manifest(spec, files, summaries, keys, ident, norm, records, settings)
    if samples:
        for p, rec in zip(plans, records):
            rec["sample"] = files[p.file].sample
            rows = samples[rec["sample"]].setdefault("rows", {s: 0 for s in splits})
            rows[p.split] += rec["rows"]
        manifest.update(samples=samples, classes=spec.classes)
    if m.collections:
        manifest["collections"] = spec.collection_info()
    _commit(spec.out_dir, staging, written, previous, records, manifest, norm)
    return manifest, len(written)


def _write(pool: Pool, spec: PrepSpec, todo: list[shards.ShardPlan], first: dict[str, Any],
           norm: dict[str, Any], cache: Path, staging: Path, show: bool) -> dict[str, dict]:
    out = spec.model.output
    tasks = [{"name": p.name, "split": p.split, "members": p.members, "cache": str(cache),
              "tmp": str(staging / p.name), "columns": first["columns"], "norm": norm,
              "collections": spec.collection_info(),
              "normalize": out.normalize, "compression": out.compression, "level": out.level,
              "attrs": p.attrs} for p in todo]
    written: dict[str, dict] = {}
    with progress(show and bool(tasks)) as bar:
        tid = bar.add_task("write shards", total=sum(p.rows for p in todo), unit="rows")
        for res in pool.run(shards.write, tasks):
            written[res["name"]] = res
            bar.update(tid, advance=res["rows"])
    return written


def _manifest(spec: PrepSpec, files: list[inp.InputFile], summaries: list[dict[str, Any]],
              keys: list[str], ident: list[str], norm: dict[str, Any],
              records: list[dict[str, Any]], settings: dict[str, Any]) -> dict[str, Any]:
    first = summaries[0]
    splits: dict[str, Any] = {s: {"rows": 0, "files": []} for s in spec.model.split.fractions}
    for rec in records:
        splits[rec["split"]]["rows"] += rec["rows"]
        splits[rec["split"]]["files"].append(rec["name"])
    return {"format": "gridml-prepare/1", "name": spec.model.name, "spec": str(spec.path),
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "module": str(spec.module_path) if spec.module_path else None, "code_hash": ident[0], "config_hash": ident[1],
            "config": spec.model.model_dump(mode="json"),
            "inputs": [inp.manifest_entry(f) for f in files],
            "events": sum(s["events"] for s in summaries),
            "columns": first["columns"], "ragged": first["ragged"], "weights": first["weights"],
            "norm": norm, "splits": splits, "shards": records, "shard_settings": settings,
            "chunks": {"size": spec.model.inputs.chunk_size, "keys": keys}}


def _commit(out_dir: Path, staging: Path, written: dict[str, dict], previous: dict | None,
            records: list[dict[str, Any]], manifest: dict[str, Any], norm: dict[str, Any]) -> None:
    """Move new shards into place, remove shards of the previous run no longer planned."""
    for name in written:
        os.replace(staging / name, out_dir / name)
    keep = {r["name"] for r in records}
    for old in (previous or {}).get("shards", []):
        if old["name"] not in keep:
            (out_dir / old["name"]).unlink(missing_ok=True)
    save_json(out_dir / NORM, {"columns": manifest["columns"], **norm})
    save_manifest(out_dir, manifest)
