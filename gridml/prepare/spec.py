"""The prepare spec (``prep.yaml``): typed models, unknown keys refused, checks with file:line.

A public interface, documented in docs/prepare.md. ``load_prep_spec(path)`` -> :class:`PrepSpec`.
"""

from __future__ import annotations

import ast
import glob
import re
from dataclasses import dataclass
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
        for did in value:
            if not _DID.match(did) or ".." in did:
                raise ValueError(f"{did!r} is not a DID: write scope:name, e.g. user.jdoe:ntuples")
        return value

    @model_validator(mode="after")
    def _some(self) -> Inputs:
        if not self.files and not self.dids:
            raise ValueError("files: no inputs; list ROOT/HDF5 files under `files` or DIDs under `dids`")
        return self


class Preprocess(_Strict):
    module: str = Field(description="user Python file, relative to the spec")
    function: str = Field("process", description="function(events, params) -> dict (docs/prepare.md)")
    params: dict[str, Any] = Field(default_factory=dict, description="passed to the function as is")
    depends: list[str] = Field(default_factory=list, description="more files hashed into the code hash")


class Pad(_Strict):
    length: int = Field(ge=1, description="collections are truncated or padded to this length")
    value: float = 0.0


class Features(_Strict):
    pad: dict[str, Pad] = Field(default_factory=dict, description="variable-length output -> fixed")
    ragged: list[str] = Field(default_factory=list, description="variable-length outputs kept ragged")

    @model_validator(mode="after")
    def _disjoint(self) -> Features:
        both = sorted(set(self.pad) & set(self.ragged))
        if both:
            raise ValueError(f"ragged: {both} also under `pad`; a feature is padded or ragged, not both")
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
    inputs: Inputs
    preprocess: Preprocess
    features: Features = Field(default_factory=Features)
    split: Split = Field(default_factory=Split)
    output: Output
    backend: Literal["local", "rucio"] | None = Field(None, description="data backend for DIDs")


@dataclass
class PrepSpec:
    """A validated prepare spec with its paths resolved."""

    model: PrepModel
    path: Path
    module_path: Path
    depends: list[Path]
    files: list[Path]
    out_dir: Path

    def config(self) -> dict[str, Any]:
        """What changes the content of a chunk's output (hashed into every cache key)."""
        m = self.model
        return {"inputs": m.inputs.model_dump(include={"format", "tree", "branches"}),
                "function": m.preprocess.function, "params": m.preprocess.params,
                "features": m.features.model_dump(), "split": m.split.model_dump()}


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


def load_prep_spec(path: str | Path) -> PrepSpec:
    """Read, validate and check ``path``; every problem in one SpecError, each with file:line."""
    path = Path(path)
    data, lines = yamlmap.read_yaml(path, kind="prepare spec",
                                    sections="name:, inputs:, preprocess:, ...; see docs/prepare.md")
    model = yamlmap.validate_model(PrepModel, data, path, lines, reference="docs/prepare.md")
    base = path.resolve().parent
    problems = []
    files, missing = _expand(base, model.inputs.files)
    for i, pattern in missing:
        problems.append(yamlmap.located(path, lines, ("inputs", "files", i),
                                        f"{pattern!r} matches no file; check the path or glob"))
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
    return PrepSpec(model=model, path=path.resolve(), module_path=module_path, depends=depends,
                    files=files, out_dir=(base / model.output.dir).resolve())


def json_schema() -> dict[str, Any]:
    """JSON Schema of the prepare spec (for editors and docs)."""
    schema = PrepModel.model_json_schema()
    schema["title"] = "gridml prepare spec"
    return schema
