"""``gridml steer``: the steering step of an iDDS HPO workflow, stateless and reproducible.

iDDS runs the task's steering command in a fresh container at every step, with ``%IN``, ``%OUT``,
``%NUM_POINTS`` and ``%MAX_POINTS`` substituted (``hpoRequestData`` of the phpo task). ``IN`` is::

    {"points": [[{hp}, loss | null], ...], "opt_space": SPACE}                        # one model
    {"points": [[[model_id, {hp}], loss | null], ...],
     "opt_space": [{"model_id": ID, "search_space": SPACE}, ...]}                     # segmented

A null loss is a point still being evaluated (pending: nothing equal to it is proposed again), a
number is a result (0.0 included; NaN is a failed evaluation, skipped by the engine). ``OUT`` is
the JSON list of new points iDDS reads back: ``[{hp}, ...]``, or ``[[model_id, {hp}], ...]`` for
the segmented form (as hpogrid's ``SteeringIDDS.run_generator`` writes it), at most
``NUM_POINTS`` and never more than ``MAX_POINTS`` in all counting the points in ``IN``; ``[]`` once
the budget is spent. Loss is minimised. SPACE is gridml's ``search.space`` or hpogrid's format
(:mod:`gridml.phpo.spaces`). The engine (``gridml.search.create``) is rebuilt from ``IN`` at every
step, seeded from (seed, number of points, model id): the same ``IN`` and seed give the same
``OUT``. A malformed ``IN`` or space is one error line naming the file; ``OUT`` is then not
written (it is written atomically, only on success).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gridml import search
from gridml.errors import GridmlError, UsageError
from gridml.phpo.spaces import SpaceProblem, to_gridml
from gridml.search.validate import point_problems
from gridml.spec.loader import MAX_INPUT_BYTES, InputLimit, load_json


class SteerError(UsageError):
    """A malformed IN, space or option: one line naming the file and what is wrong."""


@dataclass
class Segment:
    """One model's points (the single-model form has one segment, model_id None)."""

    model_id: Any
    space: dict[str, Any]
    told: list[dict[str, Any]] = field(default_factory=list)
    losses: list[float | None] = field(default_factory=list)
    pending: list[dict[str, Any]] = field(default_factory=list)

    @property
    def count(self) -> int:
        return len(self.told) + len(self.pending)


@dataclass(frozen=True)
class Engine:
    """What proposes: algorithm, seed, searcher options."""

    algorithm: str = "bayes"
    seed: int = 0
    options: Mapping[str, Any] = field(default_factory=dict)


def engine_seed(seed: int, n_points: int, model_id: Any = None) -> int:
    """The engine's seed for this step: from the seed, the number of points and the model."""
    digest = hashlib.sha256(f"{seed}:{n_points}:{json.dumps(model_id)}".encode()).digest()
    return int.from_bytes(digest[:4], "little") & 0x7FFFFFFF


# at most this many points in one IN: a Gaussian process over n points builds n x n matrices
# (240,000 points: 429 GiB); an iDDS search has max_points in the hundreds
MAX_IN_POINTS = 20_000


# ---- reading IN ----------------------------------------------------------------------------------
def read_json(path: Path, what: str) -> Any:
    """The JSON file at ``path`` within the input limits of :mod:`gridml.spec.loader` (size,
    nesting): what is read is capped before anything is built from it."""
    try:
        if path.is_file() and path.stat().st_size > MAX_INPUT_BYTES:
            raise InputLimit(f"{path}: {path.stat().st_size / 2**20:.1f} MiB, more than the "
                             f"{MAX_INPUT_BYTES / 2**20:.0f} MiB an input may have; "
                             "give a smaller file")
        return load_json(path.read_text(), str(path))
    except InputLimit as exc:
        raise SteerError(f"{exc} (the {what} file)") from None
    except FileNotFoundError:
        raise SteerError(f"{path}: no such {what} file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise SteerError(f"{path}: cannot read the {what} file: {exc}") from None
    except ValueError as exc:
        raise SteerError(f"{path}: not JSON ({exc})") from None


def _space(raw: Any, where: str) -> dict[str, Any]:
    try:
        return to_gridml(raw)
    except SpaceProblem as exc:
        raise SteerError(f"{where}: {exc}") from None


def _loss(value: Any, where: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise SteerError(f"{where}: the loss must be a number or null (pending), not {value!r}")
    return float(value)


def _normalised(space: Mapping[str, Any], point: Any, where: str) -> dict[str, Any]:
    """The point as the engine takes it (whole floats of int parameters as ints), checked."""
    if not isinstance(point, Mapping):
        raise SteerError(f"{where}: a point must be a mapping of hyperparameters, not {point!r}")
    fixed = dict(point)
    for name, dim in space.items():
        value = fixed.get(name)
        if dim["type"] == "int" and isinstance(value, float) and value.is_integer():
            fixed[name] = int(value)
    problems = point_problems(space, fixed, where=where)
    if problems:
        raise SteerError(problems[0])
    return fixed


def parse_in(doc: Any, path: Path, fallback_space: Any = None) -> tuple[bool, list[Segment]]:
    """(segmented?, segments) from IN; ``fallback_space`` serves when IN carries no opt_space."""
    if not isinstance(doc, Mapping):
        raise SteerError(f"{path}: must be a JSON object {{\"points\": [...], \"opt_space\": ...}}")
    points = doc.get("points", [])
    if points is None:
        points = []
    if not isinstance(points, list):
        raise SteerError(f"{path}: points: must be a list of [point, loss or null]")
    if len(points) > MAX_IN_POINTS:  # a searcher's model grows with the square of the points
        raise SteerError(f"{path}: points: {len(points)} points, more than the {MAX_IN_POINTS} "
                         "one steering step takes; lower the task's max_points (iDDS)")
    raw = doc.get("opt_space")
    if raw is None:
        if fallback_space is None:
            raise SteerError(f"{path}: opt_space: missing, and no --space or --spec was given")
        raw = fallback_space
    segmented = isinstance(raw, list)
    segments: dict[Any, Segment] = {}
    if segmented:
        for i, item in enumerate(raw):
            if not isinstance(item, Mapping) or "model_id" not in item:
                raise SteerError(f"{path}: opt_space[{i}]: must be {{\"model_id\": ..., "
                                 "\"search_space\": {...}}")
            space = item.get("search_space") or fallback_space
            if space is None:
                raise SteerError(f"{path}: opt_space[{i}].search_space: missing")
            key = json.dumps(item["model_id"])
            if key in segments:
                raise SteerError(f"{path}: opt_space[{i}].model_id: {item['model_id']!r} twice")
            segments[key] = Segment(item["model_id"],
                                    _space(space, f"{path}: opt_space[{i}].search_space"))
        if not segments:
            raise SteerError(f"{path}: opt_space: an empty list names no model")
    else:
        segments["null"] = Segment(None, _space(raw, f"{path}: opt_space"))
    for i, entry in enumerate(points):
        where = f"{path}: points[{i}]"
        if not isinstance(entry, list | tuple) or len(entry) != 2:
            raise SteerError(f"{where}: must be [point, loss or null]")
        head, loss = entry
        if segmented:
            if not isinstance(head, list | tuple) or len(head) != 2:
                raise SteerError(f"{where}: the segmented form wants [[model_id, point], loss]")
            model_id, point = head
            seg = segments.get(json.dumps(model_id))
            if seg is None:
                raise SteerError(f"{where}: model_id {model_id!r} is not in opt_space")
        else:
            if isinstance(head, list):
                raise SteerError(f"{where}: [[model_id, point], loss] needs opt_space as a list "
                                 "of {model_id, search_space}")
            seg, point = segments["null"], head
        value = _loss(loss, f"{where}[1]")
        point = _normalised(seg.space, point, f"{where}[0]")
        if value is None:
            seg.pending.append(point)
        else:
            seg.told.append(point)
            seg.losses.append(value if math.isfinite(value) else None)
    return segmented, list(segments.values())


# ---- proposing ----------------------------------------------------------------------------------
def quotas(segments: Sequence[Segment], num_points: int, max_points: int) -> list[int]:
    """New points per segment: at most ``num_points`` and ``max_points`` minus the points in IN,
    in all; handed out one at a time to the segment with the fewest points (segments in order)."""
    total = sum(s.count for s in segments)
    budget = max(0, min(num_points, max_points - total))
    counts = [s.count for s in segments]
    out = [0] * len(segments)
    for _ in range(budget):
        i = min(range(len(segments)), key=lambda k: (counts[k], k))
        counts[i] += 1
        out[i] += 1
    return out


def propose(segments: Sequence[Segment], num_points: int, max_points: int,
            engine: Engine) -> list[tuple[Any, dict[str, Any]]]:
    """(model_id, point) for every new point."""
    out: list[tuple[Any, dict[str, Any]]] = []
    for seg, n in zip(segments, quotas(segments, num_points, max_points)):
        if n <= 0:
            continue
        try:
            searcher = search.create(engine.algorithm, seg.space,
                                     seed=engine_seed(engine.seed, seg.count, seg.model_id),
                                     direction="minimize", **dict(engine.options))
            searcher.tell(seg.told, seg.losses)
            new = searcher.ask(n, pending=seg.pending)
        except GridmlError as exc:
            raise SteerError(f"steering engine {engine.algorithm}: {exc}") from None
        out += [(seg.model_id, _plain(p)) for p in new]
    return out


def _plain(point: Mapping[str, Any]) -> dict[str, Any]:
    """JSON-ready values (numpy scalars -> Python)."""
    return {k: (v.item() if hasattr(v, "item") else v) for k, v in point.items()}


def write_atomic(path: Path, doc: Any) -> None:
    """Write ``doc`` as JSON to ``path`` in one step (a temporary file renamed over it)."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent or Path("."))
    try:
        with os.fdopen(fd, "w") as fh:
            json.dump(doc, fh, indent=2)
            fh.write("\n")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def steer(in_path: Path, out_path: Path, num_points: int, max_points: int, engine: Engine, *,
          fallback_space: Any = None) -> list[Any]:
    """One steering step: read IN, propose, write OUT (atomically). Returns what was written."""
    if num_points < 0 or max_points < 0:
        raise SteerError(f"--num-points {num_points} / --max-points {max_points}: must be >= 0")
    if not Path(out_path).parent.is_dir():
        raise SteerError(f"{out_path}: its folder does not exist")
    segmented, segments = parse_in(read_json(Path(in_path), "iDDS input"), Path(in_path),
                                   fallback_space)
    new = propose(segments, num_points, max_points, engine)
    doc: list[Any] = [[mid, p] for mid, p in new] if segmented else [p for _, p in new]
    write_atomic(Path(out_path), doc)
    return doc
