"""The per-epoch report: the one definition the payload writes and the metrics store keeps.

Rank 0 builds one :class:`EpochReport` after each epoch (payloads/runtime/core.py), spools its
``to_json()`` to ``metrics.jsonl`` and posts the same body to the metrics API; the store
(``gridml.store.EpochReport`` is this class) reads either back with ``from_json()``.

JSON has no NaN: a number that is not finite (a diverged loss, an overflow) is written as
``null`` and read back as NaN, the same way whether the body came over HTTP or from the spool.
In the optional profile numbers ``null`` also means "not measured" and is read back as None.

Standard library only: the payload imports it on worker nodes, gridml imports it from here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

NAN = float("nan")


def finite_or_none(value: Any) -> float | None:
    """A number as JSON can hold it: NaN/inf (and None) become None."""
    if value is None:
        return None
    f = float(value)
    return f if math.isfinite(f) else None


def _json_number(value: Any) -> Any:
    """``value`` unchanged unless it is a float JSON cannot hold (then None)."""
    return None if isinstance(value, float) and not math.isfinite(value) else value


def _nan_for_null(value: Any) -> float:
    """A required number read back: null is NaN (what was not finite when written)."""
    return NAN if value is None else float(value)


@dataclass
class EpochReport:
    """What the payload's rank 0 reports after each epoch (the trial contract)."""

    epoch: int  # 1-based
    metrics: dict[str, float]  # loss, val_loss, accuracy, val_accuracy ... (NaN: not a number)
    epoch_time: float  # seconds of wall time for the epoch
    samples_per_s: float | None = None
    input_wait_frac: float | None = None  # time blocked on input / epoch time
    peak_rss_mb: float | None = None
    threads: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """Strict JSON: every non-finite number of the report is ``null``."""
        return {
            "epoch": self.epoch,
            "metrics": {k: _json_number(v) for k, v in self.metrics.items()},
            "epoch_time": _json_number(self.epoch_time),
            "samples_per_s": _json_number(self.samples_per_s),
            "input_wait_frac": _json_number(self.input_wait_frac),
            "peak_rss_mb": _json_number(self.peak_rss_mb), "threads": self.threads,
            "extra": self.extra,
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> EpochReport:
        """The report ``to_json()`` wrote (or the API received): a ``null`` metric is NaN.

        Raises KeyError, TypeError or ValueError on what is not a report."""
        metrics = d["metrics"]
        if not isinstance(metrics, dict):
            raise TypeError(f"metrics is {type(metrics).__name__}, not an object")
        return cls(
            epoch=int(d["epoch"]), metrics={k: _nan_for_null(v) for k, v in metrics.items()},
            epoch_time=_nan_for_null(d["epoch_time"]), samples_per_s=d.get("samples_per_s"),
            input_wait_frac=d.get("input_wait_frac"), peak_rss_mb=d.get("peak_rss_mb"),
            threads=d.get("threads"), extra=dict(d.get("extra") or {}),
        )
