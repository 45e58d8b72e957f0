"""Checks a spec needs beyond its types: files, hooks, DIDs, metric names.

Run on the submit host so a typo never costs a grid round trip.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gridml import fields, search
from gridml.data.base import parse_did
from gridml.errors import GridmlError, SearchError, SpecError
from gridml.search.stopping import validate_early_stopping
from gridml.spec.loader import Loc, located
from gridml.specmodel.model import Spec
from gridml.specmodel.constraint import parse_constraint

Problem = tuple[Loc, str]


def resolve_model_path(spec: Spec, spec_path: Path) -> Path:
    """The model file, relative to the spec's folder (or, failing that, the current folder)."""
    raw = Path(spec.payload.model).expanduser()
    if raw.is_absolute():
        return raw
    beside = (spec_path.parent / raw).resolve()
    return beside if beside.exists() or not Path(raw).exists() else Path(raw).resolve()


# hooks a torch model file may define (payloads/runtime/torch_model.py): name -> arguments
TORCH_HOOKS = {"loss": ("outputs", "labels"), "training_step": ("model", "batch", "loss_fn"),
               "metrics": ("y_true", "y_score", "weights")}
# hooks a model file of either framework may define (payloads/runtime/core.py: metric_hook)
HOOKS = {"metrics": TORCH_HOOKS["metrics"]}


def _takes(node: ast.FunctionDef | ast.AsyncFunctionDef, n: int) -> bool:
    """Can be called with ``n`` positional arguments."""
    a = node.args
    positional = len(a.posonlyargs) + len(a.args)
    required = positional - len(a.defaults)
    kw_required = sum(d is None for d in a.kw_defaults)
    return required <= n and (positional >= n or a.vararg is not None) and not kw_required


def check_model_file(path: Path, framework: str = "keras") -> list[Problem]:
    """The file exists, parses, and defines build_model(hparams, input_shape) at top level;
    the optional hook ``metrics(y_true, y_score, weights)`` (both frameworks) and, for torch,
    ``loss`` and ``training_step`` take the right arguments."""
    loc: Loc = ("payload", "model")
    returns = "torch.nn.Module" if framework == "torch" else "keras.Model"
    if not path.is_file():
        return [(loc, f"model file {path} does not exist; give a path relative to the spec's folder")]
    try:
        tree = ast.parse(path.read_bytes(), filename=str(path))
    except SyntaxError as exc:
        return [(loc, f"{path}:{exc.lineno}: syntax error: {exc.msg}")]
    except (ValueError, OSError) as exc:  # NUL bytes, unreadable
        return [(loc, f"{path}: not a Python source file ({exc}); give the model's .py file")]
    problems: list[Problem] = []
    found = False
    for node in tree.body:
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        if node.name == "build_model":
            found = True
            if not _takes(node, 2):
                problems.append((loc, f"{path}:{node.lineno}: build_model must take (hparams, input_shape)"))
        elif node.name in (TORCH_HOOKS if framework == "torch" else HOOKS):
            args = TORCH_HOOKS[node.name]
            if not _takes(node, len(args)):
                problems.append((loc, f"{path}:{node.lineno}: the {node.name} hook must take "
                                 f"({', '.join(args)}); fix its arguments or rename it"))
    if not found:
        problems.append((loc, f"{path} defines no top-level build_model(hparams, input_shape) -> {returns}; add one"))
    return problems


# what every payload reports in each epoch besides the training metrics (payloads/runtime/costs.py)
COST_METRICS = ("n_params", "model_mb", "inference_ms")


def _metric_problem(name: str, spec: Spec) -> str | None:
    known = {"loss"} | {m.lower() for m in spec.training.metrics}
    base = name[4:] if name.startswith("val_") else name
    if base.lower() in known or name in COST_METRICS:
        return None
    return (f"{name!r} is not reported: use loss/val_loss or one of training.metrics with an "
            f"optional val_ prefix ({sorted(known)}), or a cost metric ({', '.join(COST_METRICS)})")


def check_objective(spec: Spec) -> list[Problem]:
    """Every objective and constraint names a metric the payload reports."""
    s = spec.search
    named: list[tuple[Loc, str]] = (
        [(("search", "objectives", i, "metric"), o.metric) for i, o in enumerate(s.objectives)]
        if s.objectives else [(("search", "objective"), s.objective)])
    named += [(("search", "constraints", i), parse_constraint(c).metric)
              for i, c in enumerate(s.constraints)]
    return ([(loc, p) for loc, name in named if (p := _metric_problem(name, spec))]
            + fields.spec_problems(spec))  # values bound for batch scripts (gridml.fields)


def check_early_stopping(spec: Spec) -> list[Problem]:
    cfg = spec.search.early_stopping
    if cfg is None:
        return []
    return [(("search", "early_stopping"), p) for p in validate_early_stopping(cfg)]


def check_search(spec: Spec) -> list[Problem]:
    """Build the searcher once: unknown search.options (or a space it cannot use) fail here."""
    s = spec.search
    space = {k: v.model_dump(exclude_none=True) for k, v in s.space.items()}
    extra: dict[str, Any] = {}
    if len(s.objectives) > 1:
        extra["directions"] = [o.direction for o in s.objectives]
    if s.constraints:
        extra["constraints"] = len(s.constraints)
    try:
        search.create(s.algorithm, space, seed=s.seed, direction=s.direction, **extra, **s.options)
    except SpecError as exc:
        return [(("search", "space"), p) for p in exc.problems]
    except (SearchError, TypeError) as exc:
        for key in ("objectives", "constraints"):
            if str(exc).startswith(f"search.{key}: "):
                return [(("search", key), str(exc).removeprefix(f"search.{key}: "))]
        return [(("search", "options"), str(exc).removeprefix("search.options: "))]
    return []


def check_dids(spec: Spec, exists: Callable[[str], bool]) -> list[Problem]:
    """Every input DID is well-formed and known to the data backend."""
    problems: list[Problem] = []
    if spec.data.test is not None and spec.backend.executor == "phpo":  # panda: stream IN3
        problems.append((("data", "test"), "the phpo executor does not stage a test split into "
                         "its evaluation jobs yet; remove data.test, or run the campaign with "
                         "executor local, slurm or panda"))
    for which in ("train", "validation", "test"):
        for i, did in enumerate(spec.data.dids(which)):
            loc: Loc = ("data", which) if isinstance(getattr(spec.data, which), str) else ("data", which, i)
            try:
                parse_did(did)
                if not exists(did):
                    problems.append((loc, f"dataset {did} not found in the {spec.backend.data} data "
                                     f"store; register it with `gridml data put FILE... --dataset {did}`"))
            except GridmlError as exc:
                problems.append((loc, str(exc)))
    if spec.output.dataset:
        try:
            parse_did(spec.output.dataset)
        except GridmlError as exc:
            problems.append((("output", "dataset"), str(exc)))
    from gridml.data.limits import check_open_files  # input files vs the open-files limit
    return problems + check_open_files(spec, exists)


def check_launcher(spec: Spec) -> list[Problem]:
    """Local and Slurm executors: the payload's launcher (torchrun; horovodrun, and mpirun with
    training.horovod: mpi) is in the payload's environment (payload.python) or on PATH, and that
    interpreter exists; else every trial would fail with exit 127."""
    import os

    from gridml.payload_env import ENV_VAR, missing_launchers, payload_python

    if spec.backend.executor not in ("local", "slurm"):
        return []  # PanDA: the job's own environment (resources.container)
    python = payload_python(spec.payload.python)
    where = "payload.python" if spec.payload.python else (
        f"${ENV_VAR}" if os.environ.get(ENV_VAR) else "the controller's interpreter")
    if not Path(python).exists():
        return [(("payload", "python"), f"{python} ({where}) does not exist: name the payload "
                 "environment's bin/python")]
    missing = missing_launchers(spec.payload.framework, spec.training.horovod, spec.payload.python)
    if not missing:
        return []
    extra = "torch" if spec.payload.framework == "torch" else "keras"
    how = ("pip install 'gridml[torch]' there" if extra == "torch" else
           "build Horovod there (scripts/setup.sh, docs/hpc.md)")
    return [(("payload", "framework"), f"{' and '.join(missing)} not found beside {python} "
             f"({where}) nor on PATH: {how}, or set payload.python / ${ENV_VAR} to an "
             "environment that has it")]


def format_problems(path: Path, lines: dict[Loc, int], problems: list[Problem]) -> list[str]:
    return [located(path, lines, loc, msg) for loc, msg in problems]
