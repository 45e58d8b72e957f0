"""What a preparation returns or raises, and which columns it reads (shared by runner and build)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gridml.errors import DataError
from gridml.prepare.spec import PrepSpec, SampleSpec

__all__ = ["PrepareError", "PrepareResult", "read_branches"]


class PrepareError(DataError):
    """An input chunk could not be prepared (file, chunk and reason in the message)."""


@dataclass
class PrepareResult:
    out_dir: Path
    manifest: dict[str, Any]
    up_to_date: bool = False  # nothing had to be computed or written
    chunks: int = 0
    chunks_computed: int = 0
    shards_written: int = 0
    events: int = 0  # input events in all chunks
    events_computed: int = 0
    seconds: float = 0.0
    datasets: dict[str, str] = field(default_factory=dict)  # split -> registered DID
    timings: dict[str, float] = field(default_factory=dict)  # seconds per stage


def required_branches(spec: PrepSpec, sample: SampleSpec) -> list[str]:
    """What must exist in every file of ``sample``: the split key, its weight branch, the
    spec's feature branches, and without a function the collections' branches (and sort_by)."""
    m = spec.model
    need = list(m.split.key) + list(m.features.branches)
    if sample.weight_branch:
        need.append(sample.weight_branch)
    if m.preprocess is None:  # else the function may return them (checked per chunk)
        for c in m.collections.values():
            need += [*c.branches, *([c.sort_by] if c.sort_by else [])]
    return list(dict.fromkeys(need))


def read_extra(spec: PrepSpec) -> list[str]:
    """Branches read when a file has them (the collections'), on top of the required ones."""
    out: list[str] = []
    for c in spec.model.collections.values():
        out += [*c.branches, *([c.sort_by] if c.sort_by else [])]
    return out


def read_branches(spec: PrepSpec, sample: SampleSpec | None = None,
                  schema: dict[str, str] | None = None) -> list[str] | None:
    """The columns to read from the files of ``sample`` (default: the first): its branches
    (else inputs.branches) plus what the spec needs of it (None: all)."""
    sample = sample or spec.samples[0]
    if sample.branches is None:
        return None
    extra = [b for b in required_branches(spec, sample) + read_extra(spec)
             if schema is None or b in schema]
    return list(dict.fromkeys(sample.branches + extra))
