"""The prepare spec (``prep.yaml``): typed models, unknown keys refused, checks with file:line.

A public interface, documented in docs/prepare.md. ``load_prep_spec(path)`` -> :class:`PrepSpec`.

A spec reads either ``inputs.files``/``inputs.dids`` (one implicit sample, the original form) or
``samples:`` (several, each with its own files, tree, label and weight scaling); ``collections:``
turn per-object branches into one ``(N, L, C)`` padded or ``(N, var, C)`` ragged array.
"""

from __future__ import annotations

import ast
import glob
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from gridml.errors import SpecError
from gridml.spec import loader as yamlmap  # the one YAML-with-lines reader

NAME_RE = r"^[a-z0-9][a-z0-9._-]*$"
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kKmMgG]?)i?[bB]?\s*$")
_DID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,29}:[A-Za-z0-9][A-Za-z0-9._+-]{0,249}$")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_default=True)


def parse_size(value: str | int) -> int:
    """'64MB' / '512k' / '1G' / 1048576 -> bytes (powers of 1024)."""
    if isinstance(value, int):
        return value
    m = _SIZE.match(value)
    if not m:
        raise ValueError(f"{value!r} is not a size: write e.g. 64MB, 512kB or 1GB")
    return int(float(m[1]) * 1024 ** " KMG".index((m[2] or " ").upper()))


def _check_dids(value: list[str]) -> list[str]:
    for did in value:
        if not _DID.match(did) or ".." in did:
            raise ValueError(f"{did!r} is not a DID: write scope:name, e.g. user.jdoe:ntuples")
    return value


class Inputs(_Strict):
    files: list[str] = Field(default_factory=list, description="paths or globs, relative to the spec")
    dids: list[str] = Field(default_factory=list, description="dataset/file DIDs scope:name")
    format: Literal["root", "hdf5", "auto"] = Field("auto", description="auto: from the suffix")
    tree: str = Field("events", description="ROOT: the TTree; HDF5: the group holding the columns")
    branches: list[str] | None = Field(None, description="columns to read (default: all)")
    chunk_size: int = Field(100_000, ge=1, description="events per chunk: bounds memory per worker")

    @field_validator("dids")
    @classmethod
    def _dids(cls, value: list[str]) -> list[str]:
        return _check_dids(value)



class Preprocess(_Strict):
    module: str = Field(description="user Python file, relative to the spec")
    function: str = Field("process", description="function(events, params) -> dict (docs/prepare.md)")
    params: dict[str, Any] = Field(default_factory=dict, description="passed to the function as is")
    depends: list[str] = Field(default_factory=list, description="more files hashed into the code hash")


class Pad(_Strict):
    length: int = Field(ge=1, description="collections are truncated or padded to this length")
    value: float = 0.0


class Features(_Strict):
    branches: list[str] = Field(default_factory=list,
                                description="event-level input branches copied into x as columns "
                                            "(before the function's x)")
    pad: dict[str, Pad] = Field(default_factory=dict, description="variable-length output -> fixed")
    ragged: list[str] = Field(default_factory=list, description="variable-length outputs kept ragged")

    @model_validator(mode="after")
    def _disjoint(self) -> Features:
        both = sorted(set(self.pad) & set(self.ragged))
        if both:
            raise ValueError(f"ragged: {both} also under `pad`; a feature is padded or ragged, not both")
        return self


_COLL_RE = r"^[A-Za-z][A-Za-z0-9_]*$"
_SAMPLE_RE = r"^[A-Za-z0-9][A-Za-z0-9_-]*$"
RESERVED = ("x", "y", "w")


class Collection(_Strict):
    branches: list[str] = Field(min_length=1, description="per-object (jagged) branches, one "
                                "channel each, in this order: the array's last axis")
    sort_by: str | None = Field(None, description="branch the objects are sorted by, descending "
                                "(default: the order in the file)")
    max_length: int | None = Field(None, ge=1, description="objects kept per event (the first "
                                   "after sorting); required for layout: padded")
    layout: Literal["padded", "ragged"] = Field(
        "padded", description="padded: (N, L, C) + <name>_mask (N, L); ragged: <name>_values "
                              "(M, C) + <name>_lengths (N,)")
    pad_value: float = Field(0.0, description="value of the padding slots (padded layout)")

    @field_validator("branches")
    @classmethod
    def _unique(cls, value: list[str]) -> list[str]:
        dups = sorted({b for b in value if value.count(b) > 1})
        if dups:
            raise ValueError(f"{dups} listed twice; list each branch once")
        return value

    @model_validator(mode="after")
    def _length(self) -> Collection:
        if self.layout == "padded" and self.max_length is None:
            raise ValueError("layout padded needs max_length (the L of (N, L, C)); give it or "
                             "use layout: ragged")
        return self


class Sample(_Strict):
    files: list[str] = Field(default_factory=list, description="paths or globs, relative to the spec")
    dids: list[str] = Field(default_factory=list, description="dataset/file DIDs scope:name")
    tree: str | None = Field(None, description="the TTree / HDF5 group (default: inputs.tree)")
    branches: list[str] | None = Field(None, description="columns to read (default: "
                                       "inputs.branches); what the spec needs is added")
    label: int | str | None = Field(None, description="y of every event: an int, or a class name "
                                    "(its index in `classes`); none: the function returns y")
    scale: float = Field(1.0, description="constant factor on every event's weight")
    xsec: float | None = Field(None, gt=0, description="cross-section (with lumi: weights scaled "
                               "by xsec * lumi / sum of generator weights)")
    lumi: float | None = Field(None, gt=0, description="integrated luminosity, units matching xsec")
    weight_branch: str | None = Field(None, description="per-event generator weight: multiplies "
                                      "the weight, and its sum over the sample normalises xsec")

    @field_validator("dids")
    @classmethod
    def _dids(cls, value: list[str]) -> list[str]:
        return _check_dids(value)

    @model_validator(mode="after")
    def _check(self) -> Sample:
        if not self.files and not self.dids:
            raise ValueError("no inputs; list ROOT/HDF5 files under `files` or DIDs under `dids`")
        if (self.xsec is None) != (self.lumi is None):
            raise ValueError("xsec and lumi go together (weight = xsec * lumi / sum of "
                             "generator weights); give both or neither")
        return self


class Split(_Strict):
    fractions: dict[str, float] = Field(default_factory=lambda: {"train": 0.8, "val": 0.1, "test": 0.1})
    key: list[str] = Field(default_factory=list,
                           description="integer branches hashed per event (e.g. [run, event]); "
                                       "default: the file's content hash and the entry number")
    seed: int = 0

    @field_validator("fractions")
    @classmethod
    def _fractions(cls, value: dict[str, float]) -> dict[str, float]:
        if not value:
            raise ValueError("give at least one split, e.g. {train: 0.8, val: 0.2}")
        for name, frac in value.items():
            if not re.match(r"^[a-z][a-z0-9_]*$", name):
                raise ValueError(f"split name {name!r}: use lowercase letters, digits and _")
            if not 0 < frac <= 1:
                raise ValueError(f"{name}: fraction {frac} must be in (0, 1]")
        if abs(sum(value.values()) - 1) > 1e-6:
            raise ValueError(f"fractions sum to {sum(value.values()):g}; make them sum to 1")
        return value


class Output(_Strict):
    dir: str = Field(description="where shards, norm.json and manifest.json go (relative to the spec)")
    dataset: str | None = Field(None, description="register as <dataset>.<split> (scope:name)")
    shard_size: int | str = Field("64MB", description="target size of one shard, uncompressed")
    compression: Literal["lzf", "gzip", "none"] = Field(
        "lzf", description="lzf: fast to write and read (h5py); gzip: readable by any HDF5 tool")
    level: int = Field(4, ge=0, le=9, description="gzip level")
    normalize: Literal["store", "apply"] = Field(
        "store", description="store: write train mean/std only; apply: also standardise x")

    @field_validator("shard_size")
    @classmethod
    def _size(cls, value: int | str) -> int:
        size = parse_size(value)
        if size < 1024:
            raise ValueError(f"shard_size {size} bytes is too small; use at least 1kB (e.g. 64MB)")
        return size

    @field_validator("dataset")
    @classmethod
    def _did(cls, value: str | None) -> str | None:
        if value is not None and not _DID.match(value):
            raise ValueError(f"{value!r} is not a DID: write scope:name, e.g. user.jdoe:taus")
        return value


class PrepModel(_Strict):
    name: str = Field(pattern=NAME_RE, description="name of this preparation, [a-z0-9][a-z0-9._-]*")
    inputs: Inputs = Field(default_factory=Inputs,  # type: ignore[arg-type]
                           description="the inputs, or with `samples` the defaults of every sample")
    samples: dict[str, Sample] = Field(default_factory=dict,
                                       description="name -> sample: files, label, weight scaling")
    classes: list[str] = Field(default_factory=list, description="class names; a sample's label "
                               "may name one: y = its index (default: order of first use)")
    preprocess: Preprocess | None = Field(None, description="the user function (optional with "
                                          "samples that all have a label)")
    features: Features = Field(default_factory=Features)
    collections: dict[str, Collection] = Field(
        default_factory=dict, description="name -> per-object collection written as one array")
    split: Split = Field(default_factory=Split)
    output: Output
    backend: Literal["local", "rucio"] | None = Field(None, description="data backend for DIDs")

    @field_validator("samples")
    @classmethod
    def _sample_names(cls, value: dict[str, Sample]) -> dict[str, Sample]:
        for name in value:
            if not re.match(_SAMPLE_RE, name):
                raise ValueError(f"sample name {name!r}: use letters, digits, _ and - "
                                 "(it becomes part of the shard names)")
        return value

    @model_validator(mode="after")
    def _names(self) -> PrepModel:
        for name in self.collections:
            if not re.match(_COLL_RE, name) or name in RESERVED:
                raise ValueError(f"collections: name {name!r}: use letters, digits and _, "
                                 f"starting with a letter, and not {'/'.join(RESERVED)}")
            if name in self.features.ragged or name in self.features.pad:
                raise ValueError(f"collections: {name!r} is also under features; rename one")
        return self


@dataclass
class SampleSpec:
    """One sample with its paths resolved (the implicit sample of a spec without `samples` has
    name "" and takes everything from `inputs`)."""

    name: str
    files: list[Path]
    dids: list[str]
    tree: str
    branches: list[str] | None
    label: int | None
    scale: float = 1.0
    xsec: float | None = None
    lumi: float | None = None
    weight_branch: str | None = None

    def chunk_config(self) -> dict[str, Any]:
        """What of the sample changes its chunks' content (scale/xsec/lumi act on shards only)."""
        return {"name": self.name, "tree": self.tree, "branches": self.branches,
                "label": self.label, "weight_branch": self.weight_branch}


@dataclass
class PrepSpec:
    """A validated prepare spec with its paths resolved."""

    model: PrepModel
    path: Path
    module_path: Path | None  # None: no preprocessing function (samples with labels)
    depends: list[Path]
    files: list[Path]  # every sample's files, in sample order
    out_dir: Path
    samples: list[SampleSpec] = field(default_factory=list)
    classes: list[str] = field(default_factory=list)  # class names, y = index

    @property
    def explicit_samples(self) -> bool:
        """True when the spec has `samples:` (then y and w are always written)."""
        return bool(self.model.samples)

    def config(self) -> dict[str, Any]:
        """What changes the content of a chunk's output (hashed into every cache key); the new
        keys only when used, so the caches of older specs stay valid."""
        m = self.model
        pre = m.preprocess
        features = m.features.model_dump(exclude={"branches"} if not m.features.branches else None)
        out: dict[str, Any] = {
            "inputs": m.inputs.model_dump(include={"format", "tree", "branches"}),
            "function": pre.function if pre else None, "params": pre.params if pre else {},
            "features": features, "split": m.split.model_dump()}
        if m.samples:
            out["samples"] = [s.chunk_config() for s in self.samples]
        if m.collections:
            out["collections"] = {k: v.model_dump() for k, v in m.collections.items()}
        return out

    def collection_info(self) -> dict[str, dict[str, Any]]:
        """What the HDF5 attributes and the manifest say of each collection."""
        return {name: {"layout": c.layout, "columns": list(c.branches), "sort_by": c.sort_by,
                       "max_length": c.max_length, "pad_value": c.pad_value}
                for name, c in self.model.collections.items()}


def _expand(base: Path, patterns: list[str]) -> tuple[list[Path], list[tuple[int, str]]]:
    files: list[Path] = []
    missing: list[tuple[int, str]] = []
    for i, pattern in enumerate(patterns):
        full = pattern if Path(pattern).is_absolute() else str(base / pattern)
        found = sorted(Path(p) for p in glob.glob(full) if Path(p).is_file())
        if not found:
            missing.append((i, pattern))
        files += [p.resolve() for p in found if p.resolve() not in files]
    return files, missing


def _check_module(path: Path, function: str) -> str | None:
    if not path.is_file():
        return f"{path}: no such file; give the path of your preprocessing module"
    try:
        tree = ast.parse(path.read_bytes(), filename=str(path))
    except SyntaxError as exc:
        return f"{path}:{exc.lineno}: syntax error: {exc.msg}; fix the module"
    except (ValueError, OSError) as exc:  # NUL bytes, unreadable
        return f"{path}: not a Python source file ({exc}); give your preprocessing module"
    names = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    if function not in names:
        return f"{path.name} defines no function {function!r}; define {function}(events, params)"
    return None


def _labels(model: PrepModel) -> tuple[list[str], dict[str, int | None]]:
    """(class names, sample -> integer label): names map to their index in `classes`, or to
    the order in which the samples first use them."""
    classes = list(model.classes)
    labels: dict[str, int | None] = {}
    for name, s in model.samples.items():
        if isinstance(s.label, str):
            if s.label not in classes and not model.classes:
                classes.append(s.label)
            labels[name] = classes.index(s.label) if s.label in classes else -1
        else:
            labels[name] = s.label
    return classes, labels


def _samples(model: PrepModel, path: Path, lines: Any, base: Path,
             problems: list[str]) -> tuple[list[SampleSpec], list[str]]:
    inputs = model.inputs
    if not model.samples:
        files, missing = _expand(base, inputs.files)
        for i, pattern in missing:
            problems.append(yamlmap.located(path, lines, ("inputs", "files", i),
                                            f"{pattern!r} matches no file; check the path or glob"))
        if not inputs.files and not inputs.dids:
            problems.append(yamlmap.located(
                path, lines, ("inputs",), "files: no inputs; list ROOT/HDF5 files under `files` "
                "or DIDs under `dids` (or give `samples`)"))
        return [SampleSpec("", files, inputs.dids, inputs.tree, inputs.branches, None)], []
    if inputs.files or inputs.dids:
        problems.append(yamlmap.located(
            path, lines, ("inputs",), "files/dids given with `samples`: list the files under "
            "each sample (inputs: keeps only tree, branches, format, chunk_size)"))
    classes, labels = _labels(model)
    out = []
    for name, s in model.samples.items():
        files, missing = _expand(base, s.files)
        for i, pattern in missing:
            problems.append(yamlmap.located(path, lines, ("samples", name, "files", i),
                                            f"{pattern!r} matches no file; check the path or glob"))
        if labels[name] == -1:
            problems.append(yamlmap.located(path, lines, ("samples", name, "label"),
                                            f"{s.label!r} is not one of classes {classes}"))
        if labels[name] is None and model.preprocess is None:
            problems.append(yamlmap.located(
                path, lines, ("samples", name), "no label and no preprocess function to return "
                "y: give the sample a label (e.g. label: signal)"))
        out.append(SampleSpec(name, files, s.dids, s.tree or inputs.tree,
                              s.branches if s.branches is not None else inputs.branches,
                              labels[name], s.scale, s.xsec, s.lumi, s.weight_branch))
    return out, classes


def load_prep_spec(path: str | Path) -> PrepSpec:
    """Read, validate and check ``path``; every problem in one SpecError, each with file:line."""
    path = Path(path)
    data, lines = yamlmap.read_yaml(path, kind="prepare spec",
                                    sections="name:, inputs:, preprocess:, ...; see docs/prepare.md")
    model = yamlmap.validate_model(PrepModel, data, path, lines, reference="docs/prepare.md")
    base = path.resolve().parent
    problems: list[str] = []
    samples, classes = _samples(model, path, lines, base, problems)
    module_path: Path | None = None
    depends: list[Path] = []
    if model.preprocess is None and not model.samples:
        problems.append(yamlmap.located(path, lines, ("preprocess",), "missing: give the "
                                        "preprocessing module (or samples with labels)"))
    if model.preprocess is not None:
        module_path = (base / model.preprocess.module).resolve()
        if (why := _check_module(module_path, model.preprocess.function)) is not None:
            problems.append(yamlmap.located(path, lines, ("preprocess", "module"), why))
        depends = [(base / d).resolve() for d in model.preprocess.depends]
        for i, dep in enumerate(depends):
            if not dep.is_file():
                problems.append(yamlmap.located(path, lines, ("preprocess", "depends", i),
                                                f"{dep}: no such file; fix or remove it"))
    if problems:
        raise SpecError(problems)
    files: list[Path] = []
    for s in samples:
        files += [f for f in s.files if f not in files]
    return PrepSpec(model=model, path=path.resolve(), module_path=module_path, depends=depends,
                    files=files, out_dir=(base / model.output.dir).resolve(), samples=samples,
                    classes=classes)


def json_schema() -> dict[str, Any]:
    """JSON Schema of the prepare spec (for editors and docs)."""
    schema = PrepModel.model_json_schema()
    schema["title"] = "gridml prepare spec"
    return schema
