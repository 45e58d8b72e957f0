"""The training spec: typed models (pydantic v2), unknown keys refused; every default stated here.

This is a public interface: document changes in the README and keep `gridml schema` in step.

The models import nothing of gridml above this floor (their validators are the pure ones of
:mod:`gridml.specmodel.space` and :mod:`gridml.specmodel.constraint`), so the store and the
searchers read a study's spec typed: :func:`stored_spec` turns the JSON stored with a study into a
:class:`StoredSpec`, never raising (a field an older store lacks takes its default here).
"""

from __future__ import annotations

import copy
import dataclasses
import re
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import (BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, ValidationInfo,
                      field_validator, model_validator)

from gridml.specmodel.constraint import Constraint, parse_constraint
from gridml.specmodel.space import condition_problems, dimension_problems, point_problems

from payloads.runtime.trial import (  # the trial contract's definitions
    PRECISIONS,
    Precision,
    TrainingOptions,
)

NAME_RE = r"^[a-z0-9][a-z0-9._-]*$"
_FIGURE = re.compile(r"^(auc|rejection_at_([1-9]|[1-9][0-9]))$")  # payloads/runtime/figures.py
_WALLTIME = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*$")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_default=True)


# The validation context of a spec read back from a store: the field types hold, the checks
# across fields (made when the spec was submitted) are not made again.
STORED = {"stored": True}


def _stored(info: ValidationInfo) -> bool:
    return bool(isinstance(info.context, Mapping) and info.context.get("stored"))


def parse_walltime(value: str | int | float) -> int:
    """'1h' / '30m' / '90s' / '2d' / 3600 -> seconds."""
    if isinstance(value, (int, float)):
        return int(value)
    m = _WALLTIME.match(value)
    if not m:
        raise ValueError(f"{value!r} is not a duration: write e.g. 90s, 30m, 1h or 2d")
    return int(float(m[1]) * {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}[m[2]])


class Payload(_Strict):
    model: str = Field(description="user file defining build_model(hparams, input_shape) -> keras.Model"
                       " (torch: torch.nn.Module); relative to the spec file's folder")
    framework: Literal["keras", "torch"] = Field(
        "keras", description="keras: Horovod + Keras (payloads/train_keras.py); torch: "
        "torchrun + DistributedDataParallel (payloads/train_torch.py)")
    files: list[str] | None = Field(
        None, description="PanDA (panda, phpo): the files of the sandbox that travels to the "
        "worker node, relative to the model file's folder (checked at submit); default: that "
        "whole folder")
    python: str | None = Field(
        None, description="local and Slurm executors: the Python interpreter that runs the "
        "payload (its folder provides torchrun/horovodrun), e.g. a TensorFlow 2.15 environment's "
        "bin/python while the controller runs elsewhere; default $GRIDML_PAYLOAD_PYTHON, else the "
        "controller's own interpreter")


class InputView(_Strict):
    """Some channels of a collection as a model input of their own (ParticleNet's points)."""

    name: str
    collection: str
    columns: list[str] = Field(min_length=1, description="channel names (the collection's "
                               "`columns` attribute, as `gridml prepare` writes it)")


class Discriminant(_Strict):
    """The multi-class discriminant log(p_s / sum_i f_i p_i) of the figures of merit."""

    signal: int = Field(1, ge=0)
    background: list[int] | None = Field(None, description="default: every other class")
    fractions: dict[int, float] = Field(default_factory=dict, description="f_i of named "
                                        "background classes; the others share the rest equally")


class Data(_Strict):
    train: str | list[str] = Field(description="dataset DID(s) scope:name holding HDF5 files")
    validation: str | list[str]
    test: str | list[str] | None = Field(
        None, description="dataset DID(s) of the test split: every trial is evaluated on it "
        "once after training; its figures are stored apart and never reach the searcher")
    features: str | list[str] = Field("x", description="HDF5 dataset name(s) of the inputs")
    labels: str = "y"
    ragged: list[str] = Field(default_factory=list, description="variable-length features, stored "
                              "as <name>_values + <name>_lengths (as `gridml prepare` writes them)")
    weights: str | None = Field(None, description="HDF5 dataset of per-event weights (negative "
                                "allowed): the loss and every validation metric are weighted")
    inputs: list[str | InputView] | None = Field(
        None, description="the model's inputs in order, instead of features: a name (a "
        "collection gets its mask next: forward(jets, tracks, tracks_mask)), or {name, "
        "collection, columns} for some channels of a collection (docs/payload.md)")
    max_open_files: int | None = Field(
        None, ge=1, description="input files each payload process holds open at a time (default: "
        "sized from the soft open-files limit, ulimit -n; docs/data.md \"Many files\")")

    @model_validator(mode="after")
    def _inputs_or_features(self) -> Data:
        if self.inputs is not None:
            if "features" in self.model_fields_set:
                raise ValueError("data: give either features or inputs (the model's inputs in "
                                 "order), not both")
            names = [i if isinstance(i, str) else i.name for i in self.inputs]
            if not names or len(set(names)) != len(names):
                raise ValueError(f"data.inputs: {names} must name each input once")
            colls = {i for i in self.inputs if isinstance(i, str)}
            for i in self.inputs:
                if not isinstance(i, str) and i.collection not in colls:
                    raise ValueError(f"data.inputs: {i.name} takes channels of {i.collection}, "
                                     "which is not one of the inputs")
        return self

    def input_names(self) -> list[str]:
        """The model's inputs in order (``inputs`` when given, else ``features``)."""
        if self.inputs is None:
            return self.dids("features")
        return [i if isinstance(i, str) else i.name for i in self.inputs]

    def dids(self, which: str) -> list[str]:
        value = getattr(self, which)
        if value is None:  # data.test not given
            return []
        return [value] if isinstance(value, str) else list(value)


class Training(_Strict):
    epochs: int = Field(ge=1)
    batch_size: int = Field(256, ge=1, description="per Horovod rank")
    loss: str = "binary_crossentropy"
    metrics: list[str] = Field(default_factory=lambda: ["accuracy"])
    optimizer: Literal["adam", "sgd", "rmsprop", "adamw"] = "adam"
    workers: int = Field(1, ge=1, description="Horovod ranks per trial")
    horovod: Literal["gloo", "mpi"] = "gloo"
    mixed_precision: bool | Precision = Field(
        False, description="false | true (float16 on a GPU, float32 on a CPU) | bf16 | fp16 "
        "(also Keras' mixed_float16 / mixed_bfloat16)")
    options: TrainingOptions = Field(default_factory=TrainingOptions,
                                     description="refinements of the payload (docs/payload.md)")
    class_weights: Literal["balanced"] | dict[int, float] | None = Field(
        None, description="balanced (from the training labels' weighted counts) or {label: "
        "weight}: factors on the loss's event weights")
    discriminant: Discriminant | None = Field(
        None, description="multi-class figures of merit: {signal, background, fractions}")
    stop_on_nan: bool = Field(
        False, description="stop the trial at the first epoch whose objective is NaN or "
                           "infinite (it ends diverged either way: docs/search.md)")

    @field_validator("mixed_precision", mode="before")
    @classmethod
    def _precision(cls, v: Any) -> Any:
        if isinstance(v, bool):
            return v
        if isinstance(v, str) and v.strip().lower() in PRECISIONS:
            return v.strip().lower()
        raise ValueError(f"{v!r} is not a precision; write false, true, bf16 or fp16 (or Keras' "
                         "mixed_float16 or mixed_bfloat16)")

    def options_given(self) -> dict[str, Any]:
        """The options that differ from their defaults (what the user changed)."""
        default = TrainingOptions()
        return {f.name: getattr(self.options, f.name) for f in dataclasses.fields(TrainingOptions)
                if getattr(self.options, f.name) != getattr(default, f.name)}


class Dimension(_Strict):
    type: Literal["real", "int", "categorical"]
    low: float | None = None
    high: float | None = None
    log: bool = False
    choices: list[Any] | None = None
    conditional: dict[str, Any] | None = Field(None, description="exists only when {param: value}")

    @model_validator(mode="after")
    def _check(self, info: ValidationInfo) -> Dimension:
        if _stored(info):
            return self  # the searcher's Space applies the one validator to what it is given
        problems = dimension_problems("", self.model_dump(exclude_none=True))  # the one validator
        if problems:
            raise ValueError(problems[0].under("", skip=1))  # "high: ...": the loader adds the line
        return self


class Objective(_Strict):
    metric: str = Field(description="a reported metric: loss/val_loss, training.metrics (val_ "
                        "prefix optional) or a cost metric (n_params, model_mb, inference_ms)")
    direction: Literal["minimize", "maximize"] = "minimize"


class Search(_Strict):
    algorithm: Literal["bayes", "skopt", "optuna", "random", "grid", "evolution",
                       "external"] = "bayes"  # external: the points come over the API
    objective: str = "val_loss"
    direction: Literal["minimize", "maximize"] = "minimize"
    max_trials: int = Field(8, ge=1)
    parallel: int = Field(1, ge=1, description="trials running at once")
    seed: int = 0
    space: dict[str, Dimension] = Field(default_factory=dict, description="empty only for "
                                        "algorithm external (then any enqueued point is taken)")
    early_stopping: dict[str, Any] | None = None
    options: dict[str, Any] = Field(default_factory=dict, description="searcher options, e.g. grid_points")
    warm_start: list[str] = Field(default_factory=list, description="earlier studies (same "
                                  "objective) whose finished trials the searcher is told")
    initial_points: list[dict[str, Any]] = Field(default_factory=list,
                                                 description="points to run first")
    objectives: list[Objective] = Field(
        default_factory=list, description="several objectives (instead of objective/direction): "
        "the study's result is the Pareto front; algorithms optuna (sampler tpe or nsgaii) and "
        "random")
    constraints: list[str] = Field(default_factory=list, description="'<metric> <op> <number>' "
                                   "(op <=, <, >=, >), e.g. 'inference_ms <= 2': a trial missing "
                                   "one is infeasible, never best nor on the Pareto front")

    @model_validator(mode="after")
    def _check(self, info: ValidationInfo) -> Search:
        if _stored(info):
            if self.objectives:  # the first is primary
                self.objective, self.direction = self.objectives[0].metric, self.objectives[0].direction
            return self
        if not self.space and self.algorithm != "external":
            raise ValueError("space: give at least one parameter (only algorithm: external, "
                             "whose points come over the API, may leave it out)")
        if self.parallel > self.max_trials:
            raise ValueError(f"parallel: {self.parallel} is more than max_trials "
                             f"({self.max_trials}); lower parallel to at most {self.max_trials}")
        space = {k: d.model_dump(exclude_none=True) for k, d in self.space.items()}
        problems = condition_problems(space)  # the one validator
        if problems:
            raise ValueError(problems[0].under("space"))
        for i, point in enumerate(self.initial_points):
            bad = point_problems(space, point, f"initial_points.{i}")
            if bad:
                raise ValueError(bad[0])
        for i, text in enumerate(self.constraints):
            try:
                parse_constraint(text)
            except ValueError as exc:
                raise ValueError(f"constraints.{i}: {exc}") from None
        if self.objectives:
            first = self.objectives[0]
            given = {"objective", "direction"} & self.model_fields_set
            if given and (self.objective, self.direction) != (first.metric, first.direction):
                raise ValueError(f"objectives: give either objective/direction or objectives, "
                                 f"not both; remove {' and '.join(sorted(given))}")
            metrics = [o.metric for o in self.objectives]
            if len(set(metrics)) != len(metrics):
                raise ValueError(f"objectives: {metrics} names a metric twice; list each once")
            self.objective, self.direction = first.metric, first.direction  # the first is primary
        return self

    def goals(self) -> list[tuple[str, str]]:
        """[(metric, direction)]: ``objectives`` when given (the first is primary), else the
        single ``objective``/``direction``."""
        return [(o.metric, o.direction) for o in self.objectives] or [(self.objective, self.direction)]

    def parsed_constraints(self) -> list[Constraint]:
        """The constraints parsed (ValueError for a malformed one: only a stored spec has one)."""
        return [parse_constraint(c) for c in self.constraints]

    def space_dict(self) -> dict[str, dict[str, Any]]:
        """The space as the searchers and the point validator take it (JSON form, no None)."""
        return {name: dim.model_dump(mode="json", exclude_none=True) for name, dim in self.space.items()}


class Resources(_Strict):
    nodes: int = Field(1, ge=1, description="nodes per trial (Slurm); cores, gpus and memory_gb "
                       "are per node")
    cores: int = Field(1, ge=1, description="per trial (per node when nodes > 1), all ranks together")
    gpus: int = Field(0, ge=0, description="per node")
    memory_gb: float = Field(4, gt=0, description="per node")
    walltime: str | int = "1h"
    container: str | None = None
    vram_gb: float | None = Field(None, gt=0, description="grid: minimum GPU memory (architecture string)")

    @field_validator("walltime")
    @classmethod
    def _walltime(cls, v: str | int) -> str | int:
        parse_walltime(v)
        return v

    @property
    def walltime_s(self) -> int:
        return parse_walltime(self.walltime)


class Backend(_Strict):
    executor: Literal["local", "panda", "phpo", "slurm", "dryrun"] = "local"
    data: Literal["local", "rucio"] = "local"
    server: str = Field("embedded", description="'embedded' or the URL of a `gridml serve`")
    retries: int = Field(1, ge=0, description="resubmissions of a failed trial")
    max_continuations: int = Field(
        10, ge=0, description="times a trial may be continued from a checkpoint in a new job "
        "after its job was preempted or hit its walltime (Slurm's warning signal: "
        "slurm.signal_grace); these use no retry (docs/hpc.md \"Preemption and walltime\")")
    heartbeat_timeout: str | int = Field("15m", description="a running trial silent this long fails")
    stall_timeout: str | int = Field(
        "30m", description="a running trial that finishes no batch this long is stalled: its "
        "stack is dumped to its log, it is killed and retried once (progress.json, gridml/live.py)")
    max_same_failures: int = Field(
        3, ge=1, description="the campaign stops once this many trials have failed with the "
        "same error (a bad model file fails every trial alike)")

    @field_validator("heartbeat_timeout", "stall_timeout")
    @classmethod
    def _hb(cls, v: str | int) -> str | int:
        parse_walltime(v)
        return v


class Panda(_Strict):
    site: str | None = Field(None, description="PanDA queue; None lets the brokerage choose")
    nickname: str | None = Field(None, description="grid nickname; default: from the token/proxy")
    working_group: str | None = None
    vo: str = "atlas"
    rse: str | None = Field(None, description="destination for outputs (destSE)")


class Slurm(_Strict):
    partition: str | None = Field(None, description="sbatch --partition; None: the cluster's default")
    account: str | None = Field(None, description="sbatch --account")
    qos: str | None = Field(None, description="sbatch --qos")
    constraint: str | None = Field(None, description="sbatch --constraint, e.g. a100")
    setup: list[str] = Field(default_factory=list, description="shell lines run on the nodes before "
                             "the payload (module load ..., source env/bin/activate)")
    options: dict[str, str | int | float | bool | None] = Field(
        default_factory=dict, description="any other sbatch option: {exclusive: true, "
        "gpus-per-task: 1} -> --exclusive --gpus-per-task=1")
    signal_grace: str | int = Field(
        120, description="seconds (or a duration: 2m) before the job's end (walltime, "
        "preemption) when Slurm warns the trial (--signal=B:USR1@N): it checkpoints at the next "
        "batch and is continued in a new job; 0: no warning (docs/hpc.md)")
    pack: int | None = Field(None, ge=1, le=1024, description="K trial slots per allocation: one "
                             "sbatch holds K trials, each run as a job step (srun --exact); as a "
                             "step ends the next trial starts in its slot (docs/hpc.md)")
    pack_walltime: str | int | None = Field(None, description="with pack: the walltime of each "
                                            "allocation; default 4 x resources.walltime")
    array: bool = Field(False, description="the trials a cycle submits go as one job array (one "
                        "sbatch), one array task per trial")
    array_throttle: int | None = Field(None, ge=1, description="with array: at most N of its tasks "
                                       "run at once (--array=...%N)")

    @field_validator("pack_walltime")
    @classmethod
    def _pack_walltime(cls, v: str | int | None) -> str | int | None:
        if v is not None:
            parse_walltime(v)
        return v

    @field_validator("signal_grace")
    @classmethod
    def _signal_grace(cls, v: str | int) -> str | int:
        seconds = parse_walltime(v)
        if not 0 <= seconds <= 65535:  # sbatch --signal takes 0..65535 s
            raise ValueError(f"{v!r}: give 0 (no warning) up to 65535 s, e.g. 120 or 5m")
        return v

    @property
    def signal_grace_s(self) -> int:
        return parse_walltime(self.signal_grace)

    @property
    def pack_walltime_s(self) -> int | None:
        return parse_walltime(self.pack_walltime) if self.pack_walltime is not None else None


class Output(_Strict):
    dataset: str | None = Field(None, description="scope:name of the study's output dataset;"
                                " default <train scope>:<study>.out")
    rse: str | None = Field(None, description="Rucio: RSE the outputs are written to (the output "
                            "dataset's rule); default $GRIDML_RUCIO_RSE")
    lifetime: str | int | None = Field(None, description="Rucio: lifetime of that rule, e.g. 30d; "
                                       "default none (kept)")

    @field_validator("lifetime")
    @classmethod
    def _lifetime(cls, v: str | int | None) -> str | int | None:
        if v is not None:
            parse_walltime(v)
        return v


class Spec(_Strict):
    name: str = Field(pattern=NAME_RE, max_length=100)
    payload: Payload
    data: Data
    training: Training
    search: Search
    resources: Resources = Field(default_factory=Resources)
    backend: Backend = Field(default_factory=Backend)
    panda: Panda = Field(default_factory=Panda)
    slurm: Slurm = Field(default_factory=Slurm)
    output: Output = Field(default_factory=Output)

    @model_validator(mode="after")
    def _figures_of_merit_reported(self) -> Spec:
        """An objective or constraint naming a figure of merit (val_rejection_at_NN, val_auc)
        makes the payload compute it: its name joins training.metrics."""
        s = self.search
        named = [o.metric for o in s.objectives] + [s.objective]
        for c in s.constraints:
            try:
                named.append(parse_constraint(c).metric)
            except ValueError:
                continue
        for name in named:
            base = name[4:] if name.startswith("val_") else name
            if (_FIGURE.match(base) and base not in self.training.metrics
                    and base.lower() not in [m.lower() for m in self.training.metrics]):
                self.training.metrics.append(base)
        return self

    @model_validator(mode="after")
    def _torch_has_no_horovod(self) -> Spec:
        if self.payload.framework == "torch" and self.training.horovod != "gloo":
            raise ValueError(f"training.horovod: {self.training.horovod} is a Horovod launcher and "
                             "torch trials run under torchrun; remove training.horovod")
        return self

    @model_validator(mode="after")
    def _workers_fit(self) -> Spec:
        res, workers = self.resources, self.training.workers
        if res.nodes > 1:
            on = f"on {res.nodes} nodes"
            if self.backend.executor not in ("slurm", "dryrun"):
                raise ValueError(f"resources.nodes: {res.nodes} nodes per trial need backend.executor: "
                                 f"slurm; use nodes: 1 with {self.backend.executor}")
            if self.payload.framework != "torch" and self.training.horovod != "mpi":
                raise ValueError(f"training.horovod: {self.training.horovod} cannot span nodes "
                                 f"without ssh; use horovod: mpi for resources.nodes {res.nodes}")
            if workers < res.nodes:
                raise ValueError(f"training.workers: {workers} ranks {on} leaves a node idle; give "
                                 f"every node a rank (workers >= {res.nodes}) or lower resources.nodes")
            if self.payload.framework == "torch" and workers % res.nodes:
                raise ValueError(f"training.workers: {workers} torch ranks on {res.nodes} nodes; "
                                 f"torchrun starts as many on every node (make workers a multiple "
                                 f"of {res.nodes})")
        else:
            on = "on 1 node"
        if res.gpus > 0 and workers > res.nodes * res.gpus and self.backend.executor == "slurm":
            raise ValueError(
                f"training.workers: {workers} Horovod ranks but {res.nodes * res.gpus} GPUs {on} "
                f"(resources.gpus {res.gpus} per node); lower workers or raise resources.gpus/nodes")
        if workers > res.nodes * res.cores and res.gpus == 0:
            raise ValueError(
                f"training.workers: {workers} Horovod ranks but resources.cores is "
                f"{res.cores}" + (f" per node ({res.nodes * res.cores} {on})" if res.nodes > 1 else "")
                + "; give each rank a core (raise resources.cores or lower workers)")
        return self


def _stored_search() -> Search:
    return Search.model_validate({}, context=STORED)


class StoredSpec(BaseModel):
    """A study's spec read back from the store, typed. Written by ``gridml submit`` it is a whole
    resolved :class:`Spec`; created over the API it may hold only a ``search`` section; written by
    an older gridml it lacks the fields added since. Every field missing (or not of its type) holds
    the default the models state; the sections without defaults are None when missing."""

    model_config = ConfigDict(extra="ignore")  # x_model_source, and keys of a newer gridml

    name: str | None = None
    payload: Payload | None = None
    data: Data | None = None
    training: Training | None = None
    search: Search = Field(default_factory=_stored_search)
    resources: Resources = Field(default_factory=Resources)
    backend: Backend = Field(default_factory=Backend)
    panda: Panda = Field(default_factory=Panda)
    slurm: Slurm = Field(default_factory=Slurm)
    output: Output = Field(default_factory=Output)
    _problems: list[str] = PrivateAttr(default_factory=list)

    @property
    def problems(self) -> list[str]:
        """``field: message`` of every stored value left out (its default taken instead)."""
        return list(self._problems)


def stored_spec(raw: Any) -> StoredSpec:
    """The stored JSON spec ``raw`` as a :class:`StoredSpec`; never raises: a value that is not of
    its field's type is left out (its default taken, the problem kept in ``problems``)."""
    data: Any = raw if isinstance(raw, Mapping) else {}
    problems: list[str] = []
    for _ in range(200):
        try:
            view = StoredSpec.model_validate(data, context=STORED)
            view._problems = problems
            return view
        except ValidationError as exc:
            if data is raw:
                data = copy.deepcopy(dict(raw))
            err = exc.errors(include_url=False)[0]
            loc = tuple(err["loc"])
            problems.append(f"{'.'.join(str(p) for p in loc)}: {err['msg']}")
            if not _drop(data, loc[:-1] if err["type"] == "missing" else loc):
                break
    view = StoredSpec.model_validate({}, context=STORED)
    view._problems = problems + ["(top level): the stored spec could not be read; defaults taken"]
    return view


def stored_search(raw: Any) -> Search:
    """A ``search`` section in JSON form (a mapping) as a :class:`Search`, as :func:`stored_spec`
    reads it; a :class:`Search` is returned as it is."""
    if isinstance(raw, Search):
        return raw
    return stored_spec({"search": raw}).search


def _drop(data: Any, loc: tuple[Any, ...]) -> bool:
    """Remove the deepest value on the path ``loc`` that exists in ``data``; False: none does."""
    parent: Any = None
    key: Any = None
    node = data
    for part in loc:
        if isinstance(node, dict) and part in node:
            parent, key, node = node, part, node[part]
        elif isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
            parent, key, node = node, part, node[part]
        else:
            break
    if parent is None:
        return False
    del parent[key]
    return True
