"""What a preparation returns or raises, and which columns it reads (shared by runner and build)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gridml.errors import DataError
from gridml.prepare.spec import PrepSpec

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


def read_branches(spec: PrepSpec) -> list[str] | None:
    """The columns to read: inputs.branches plus the split key (None: all)."""
    m = spec.model
    if m.inputs.branches is None:
        return None
    return m.inputs.branches + [k for k in m.split.key if k not in m.inputs.branches]
