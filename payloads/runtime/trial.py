"""The trial contract, defined once: ``trial.json`` as typed objects (stdlib only, versioned).

gridml builds a :class:`TrialDoc` and writes ``to_json()``; the payload (on this machine, on a
grid worker node or on an HPC node, in whatever Python 3.11+ environment the node brings) reads it
back with :func:`load_trial`. gridml may import this module; it imports nothing of gridml.

The framework-neutral parts (data, inputs, outputs, api, resources, seed) stand apart from the
framework's :class:`Training` block. Every training option is a typed field of
:class:`TrainingOptions`: the spec refuses unknown or mistyped options at submit time
(``gridml validate``) with the same field list, and :func:`check_options` refuses them here for a
document written by hand or by another gridml version. See docs/trial-contract.md.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import os
import stat
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from collections.abc import Sequence
from typing import Any, Literal, Union

from payloads.runtime.errors import PayloadFailure

CONTRACT_VERSION = 2
# training.mixed_precision besides true/false: bf16 | fp16 and Keras' policy names
Precision = Literal["bf16", "fp16", "mixed_float16", "mixed_bfloat16"]
PRECISIONS: tuple[str, ...] = typing.get_args(Precision)
READABLE_VERSIONS = (1, 2)  # version 1: the options sat directly in the training block
FRAMEWORKS = ("keras", "torch")


@dataclass(frozen=True)
class TrainingOptions:
    """``training.options`` of the spec: refinements of the payload, all optional."""

    # pydantic (on the submit host) validates this dataclass as the spec's field; unknown keys out
    __pydantic_config__: typing.ClassVar[dict[str, Any]] = {"extra": "forbid"}

    lr_scaling: Literal["linear", "none"] = "linear"  # linear: lr x ranks (Goyal et al. 2017)
    shuffle_buffer_chunks: int = 8  # rows are shuffled within windows of this many chunks
    prefetch_batches: int = 4  # read-ahead depth (whole windows are read ahead)
    cache_budget_mb: float = 1024  # RAM cache of decoded chunks, per rank
    cache_compression: Literal["auto", "none", "blosc2"] = "auto"
    checkpoint: bool = True  # checkpoint every epoch and resume from it
    gradient_compression: Literal["none", "fp16"] = "none"  # allreduce in float16
    reader_processes: int | Literal["auto"] = "auto"  # HDF5 decoding processes per rank
    adapt_samples: int = 20000  # rows used to adapt normalisation layers
    bucket_by_length: bool = False  # bucketing for ragged features
    pad_value: float = 0.0  # padding of ragged features
    verbose: int = 0  # the framework's progress output on rank 0


@dataclass(frozen=True)
class Training:
    """The framework's block: what to train and how."""

    framework: Literal["keras", "torch"] = "keras"
    epochs: int = 1
    batch_size: int = 256  # per rank
    loss: str = "binary_crossentropy"
    metrics: tuple[str, ...] = ("accuracy",)
    optimizer: str = "adam"
    mixed_precision: bool | Precision = False
    workers: int = 1  # ranks in all
    launcher: str = "gloo"  # keras: horovodrun's controller (gloo | mpi); torch: torchrun
    options: TrainingOptions = field(default_factory=TrainingOptions)
    # "balanced" | {label: factor} (JSON keys are strings) | None (payloads/runtime/figures.py)
    class_weights: str | dict[str, float] | None = None
    # {signal: s, background: [...], fractions: {i: f}} of a multi-class model (figures.py)
    discriminant: dict[str, Any] | None = None
    # stop at the first epoch whose loss or a metric is not finite (training.stop_on_nan): the
    # trial ends there, its last epoch NaN, and the controller marks it diverged
    stop_on_nan: bool = False


@dataclass(frozen=True)
class Data:
    features: tuple[str, ...] = ("x",)  # the model's inputs in order (collections among them)
    labels: str = "y"
    ragged: tuple[str, ...] = ()
    weights: str | None = None  # per-event weights (HDF5 dataset), None: all 1
    # features that are collections: (N, L, C) padded + <name>_mask, or ragged <name>_values +
    # <name>_lengths; the model gets the collection and then its mask ``<name>_mask`` (B, L)
    collections: tuple[str, ...] = ()
    # derived inputs: {name, collection, columns: [channel names]} (channels of a collection,
    # with its mask); appended to the model's inputs in this order
    views: tuple[dict[str, Any], ...] = ()
    train: tuple[str, ...] = ()  # staged file paths (or names, on a remote node before staging)
    validation: tuple[str, ...] = ()
    # data.test's staged files: evaluated once after training (result.json "test", roc_test.*),
    # never reported as an epoch metric; written only when given (older payloads read the rest)
    test: tuple[str, ...] = ()
    # data.max_open_files: input files each payload process holds open at a time (None: sized
    # from the soft RLIMIT_NOFILE; pipeline/h5source.py); written only when given
    max_open_files: int | None = None
    # the layout records of the input files (sidecars in the study's inputs/ folder, one per
    # input dataset, pipeline/layouts.py): the payload checks those files without opening
    # them at start; written only when there are some
    layouts: tuple[str, ...] = ()


@dataclass(frozen=True)
class Resources:
    cores: int = 1  # per trial, all ranks together (per node when nodes > 1)
    gpus: int = 0
    nodes: int = 1


@dataclass(frozen=True)
class Api:
    url: str
    token: str | None = None


@dataclass(frozen=True)
class TrialDoc:
    """Everything the payload reads from trial.json."""

    study: str
    trial_id: int
    trial_number: int
    hparams: dict[str, Any]
    model_file: Path
    training: Training
    data: Data
    output_dir: Path
    study_id: int = 0
    seed: int = 0
    resources: Resources = field(default_factory=Resources)
    api: Api | None = None
    heartbeat_s: float = 30.0
    early_stopping: bool = False
    inputs: tuple[dict[str, Any], ...] = ()  # [{did, dataset, adler32, bytes}]
    provenance: dict[str, Any] = field(default_factory=dict)
    version: int = CONTRACT_VERSION
    path: Path | None = None  # where it was read from (not written)

    # ---- conveniences for the payload ------------------------------------------------------
    @property
    def cores(self) -> int:
        return max(1, self.resources.cores)

    @property
    def gpus(self) -> int:
        return self.resources.gpus

    @property
    def learning_rate(self) -> float:
        return float(self.hparams.get("learning_rate", 1e-3))

    # ---- (de)serialisation -----------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        doc = _plain(self)
        doc.pop("path")
        if not doc["data"]["test"]:
            doc["data"].pop("test")
        if doc["data"].get("max_open_files") is None:
            doc["data"].pop("max_open_files", None)
        if not doc["data"].get("layouts"):
            doc["data"].pop("layouts", None)
        return doc

    def dumps(self) -> str:
        """Indented for a reader; compact (C encoder, ~10x faster than the indenting one)
        for a trial over more than 1,000 input files, whose paths and inputs nobody reads by eye."""
        doc = self.to_json()
        files = sum(len(doc["data"].get(k) or ()) for k in ("train", "validation", "test"))
        if files > 1000:
            return json.dumps(doc, sort_keys=True, separators=(",", ":"))
        return json.dumps(doc, indent=2, sort_keys=True)

    def replace(self, **changes: Any) -> TrialDoc:
        return dataclasses.replace(self, **changes)

    @classmethod
    def from_json(cls, d: dict[str, Any], *, base: Path | None = None,
                  where: str = "trial.json") -> TrialDoc:
        """Check and type a decoded document. Relative paths are taken relative to ``base``."""
        if not isinstance(d, dict):
            raise _bad(where, "(top level)", "must be a JSON object")
        version = d.get("version", 1)
        if version not in READABLE_VERSIONS:
            raise _bad(where, "version", f"{version!r} is not a contract version this payload "
                       f"reads ({', '.join(map(str, READABLE_VERSIONS))}); update the payload")
        for key in ("trial_id", "model_file", "output_dir", "data", "training"):
            if d.get(key) is None:
                raise _bad(where, key, "is missing; the controller must write it "
                           "(see docs/trial-contract.md)")
        tr = dict(d["training"])
        if version == 1:  # options sat beside epochs, batch_size, ... in the training block
            names = {f.name for f in dataclasses.fields(Training)} - {"options"}
            tr = {k: v for k, v in tr.items() if k in names} | {
                "options": {k: v for k, v in tr.items() if k not in names}}
        options, problems = check_options(tr.pop("options", None) or {})
        if problems:
            key, msg = problems[0]
            raise _bad(where, f"training.options.{key}", msg)
        training = _build(Training, tr, where, "training", options=options)
        data = _build(Data, d["data"], where, "data")
        here = base or Path(".")
        data = dataclasses.replace(
            data, train=resolve_paths(here, data.train),
            validation=resolve_paths(here, data.validation),
            test=resolve_paths(here, data.test), layouts=resolve_paths(here, data.layouts))
        api = d.get("api")
        return cls(
            study=str(d.get("study", "study")), trial_id=int(d["trial_id"]),
            trial_number=int(d.get("trial_number", 0)), hparams=dict(d.get("hparams") or {}),
            model_file=(here / d["model_file"]).resolve(), training=training, data=data,
            output_dir=(here / d["output_dir"]).resolve(), study_id=int(d.get("study_id") or 0),
            seed=int(d.get("seed") or 0),
            resources=_build(Resources, d.get("resources") or {}, where, "resources"),
            api=_build(Api, api, where, "api") if api and api.get("url") else None,
            heartbeat_s=float(d.get("heartbeat_s") or 30.0),
            early_stopping=bool(d.get("early_stopping", False)),
            inputs=tuple(d.get("inputs") or ()), provenance=dict(d.get("provenance") or {}),
            version=CONTRACT_VERSION, path=base / "trial.json" if base else None)


def resolve_paths(here: Path, paths: Sequence[str]) -> tuple[str, ...]:
    """``str((here / p).resolve())`` for each of ``paths``, with about one ``lstat`` a file:
    ``Path.resolve`` walks every component of every path (~9 syscalls a file: 12,000 input
    files took ~1 s of the payload's start; docs/data.md, "Many files"). Here each folder is
    resolved once (from its resolved parent), and a name is joined to its resolved folder
    unless it is a symlink (or cannot be lstat-ed: missing), which is resolved whole."""
    known: dict[str, str] = {}

    def real(path: str) -> str:
        if (done := known.get(path)) is not None:
            return done
        head, name = os.path.split(path)
        if name in ("", ".", "..") or head == path:
            out = str(Path(path).resolve())
        else:
            out = os.path.join(real(head), name)
            try:
                link = stat.S_ISLNK(os.lstat(out).st_mode)
            except OSError:
                link = True
            if link:
                out = str(Path(path).resolve())
        known[path] = out
        return out

    return tuple(real(os.path.join(here, p)) for p in paths)


def load_trial(path: str | Path) -> TrialDoc:
    """Read and check trial.json; relative paths are taken relative to the trial file."""
    path = Path(path).resolve()
    try:
        d = json.loads(path.read_text())
    except FileNotFoundError:
        raise PayloadFailure(f"{path}: trial file not found", code=2) from None
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        line = f":{e.lineno}" if isinstance(e, json.JSONDecodeError) else ""
        raise PayloadFailure(f"{path}{line}: not valid JSON ({e})", code=2) from None
    doc = TrialDoc.from_json(d, base=path.parent, where=str(path))
    if not doc.data.train:
        raise PayloadFailure(f"{path}: data.train lists no files", code=2)
    return dataclasses.replace(doc, path=path)


# ---- training options ----------------------------------------------------------------------
def option_names() -> list[str]:
    return [f.name for f in dataclasses.fields(TrainingOptions)]


def did_you_mean(name: str, choices: list[str]) -> str:
    close = difflib.get_close_matches(name, choices, n=1, cutoff=0.6)
    return f"did you mean {close[0]}?" if close else f"use one of {', '.join(choices)}"


def check_options(raw: dict[str, Any]) -> tuple[TrainingOptions, list[tuple[str, str]]]:
    """Typed options, and the problems as (option, message) pairs (empty when all is well)."""
    if not isinstance(raw, dict):
        return TrainingOptions(), [("", "must be a mapping of option: value")]
    problems: list[tuple[str, str]] = []
    hints = typing.get_type_hints(TrainingOptions)
    good: dict[str, Any] = {}
    for key, value in raw.items():
        if key not in hints or key.startswith("__"):
            problems.append((key, f"unknown option; {did_you_mean(str(key), option_names())}"))
            continue
        ok, typed = _coerce(value, hints[key])
        if ok:
            good[key] = typed
        else:
            problems.append((key, f"{value!r} is not {_describe(hints[key])}; fix the value"))
    return TrainingOptions(**good), problems


# ---- helpers -------------------------------------------------------------------------------
def _bad(where: str, key: str, msg: str) -> PayloadFailure:
    return PayloadFailure(f"{where}: {key}: {msg}", code=2)


def _coerce(value: Any, hint: Any) -> tuple[bool, Any]:
    """(True, value as ``hint``) when ``value`` is of that type (ints accepted for floats)."""
    origin = typing.get_origin(hint)
    if origin is Literal:
        return (value in typing.get_args(hint)), value
    if origin in (Union, types.UnionType):
        for arm in typing.get_args(hint):
            ok, typed = _coerce(value, arm)
            if ok:
                return True, typed
        return False, value
    if origin is tuple:
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, (list, tuple)):
            return False, value
        arm = typing.get_args(hint)[0]
        return all(isinstance(v, typing.get_origin(arm) or arm) for v in value), tuple(value)
    if origin is dict:
        return isinstance(value, dict), value
    if hint is type(None):
        return value is None, value
    if hint is bool:
        return isinstance(value, bool), value
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool), value
    if hint is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        return ok, float(value) if ok else value
    if hint is str:
        return isinstance(value, str), value
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return isinstance(value, hint), value
    return True, value


def _describe(hint: Any) -> str:
    origin = typing.get_origin(hint)
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in typing.get_args(hint))
    if origin in (Union, types.UnionType):
        return " or ".join(_describe(a) for a in typing.get_args(hint))
    if origin is tuple:
        return f"a list of {_describe(typing.get_args(hint)[0])}"
    if origin is dict:
        return "a mapping"
    return {bool: "true or false", int: "a whole number", float: "a number",
            str: "a string", type(None): "null"}.get(hint, str(hint))


def _build(cls: type, raw: Any, where: str, section: str, **given: Any) -> Any:
    """``cls(**raw)`` with each field checked against its annotation."""
    if not isinstance(raw, dict):
        raise _bad(where, section, "must be a JSON object")
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(raw) - names - set(given))
    if unknown:
        raise _bad(where, f"{section}.{unknown[0]}",
                   f"unknown field; {did_you_mean(unknown[0], sorted(names))}")
    values: dict[str, Any] = dict(given)
    for key, value in raw.items():
        if key in given:
            continue
        ok, typed = _coerce(value, hints[key])
        if not ok:
            raise _bad(where, f"{section}.{key}", f"{value!r} is not {_describe(hints[key])}")
        values[key] = typed
    return cls(**values)


def _plain(obj: Any) -> Any:
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: _plain(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, (list, tuple)):
        return [_plain(v) for v in obj]
    if isinstance(obj, dict):
        return {k: _plain(v) for k, v in obj.items()}
    if isinstance(obj, Path):
        return str(obj)
    return obj

