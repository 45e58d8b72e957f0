"""Per-epoch profile numbers of one rank: wall times, input wait, peak RSS, thread count."""

from __future__ import annotations

import resource
import sys
from typing import Any

from payloads.runtime.threads import thread_count


def peak_rss_mb() -> float:
    """Peak resident set size of this process so far, in MiB."""
    kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return round(kb / (1024 * 1024 if sys.platform == "darwin" else 1024), 1)


def combine(per_rank: list[dict[str, Any]], batch_global_samples: int) -> dict[str, Any]:
    """Merge ranks' profiles into the report's fields (the slowest rank decides).

    ``input_wait_frac``: the largest over ranks (one input-bound rank holds all the others at
    the next allreduce); ``peak_rss_mb``/``threads``: the largest single rank (totals in extra).
    """
    epoch_time = max(p["epoch_time"] for p in per_rank)
    train_time = max(p["train_time"] for p in per_rank) or epoch_time
    return {
        "epoch_time": round(epoch_time, 4),
        "samples_per_s": round(batch_global_samples / train_time, 1) if train_time else None,
        "input_wait_frac": round(max(p["wait_s"] / max(p["epoch_time"], 1e-9)
                                     for p in per_rank), 4),
        "peak_rss_mb": max(p["peak_rss_mb"] for p in per_rank),
        "threads": max(p["threads"] for p in per_rank),
        "extra": {
            "train_time": round(train_time, 4),
            "val_time": round(max(p["val_time"] for p in per_rank), 4),
            "train_samples": batch_global_samples,
            "ranks": len(per_rank),
            "wait_s_per_rank": [round(p["wait_s"], 4) for p in per_rank],
            "peak_rss_mb_total": round(sum(p["peak_rss_mb"] for p in per_rank), 1),
            "threads_total": sum(p["threads"] for p in per_rank),
            "cpu_s_per_rank": [round(p["cpu_s"], 3) for p in per_rank],
            "cpu_util": round(sum(p["cpu_s"] for p in per_rank)
                              / max(1e-9, sum(p["epoch_time"] for p in per_rank)), 3),
        },
    }


def rank_profile(epoch_time: float, train_time: float, wait_s: float, samples: int,
                 cpu_s: float = 0.0) -> dict:
    """This rank's epoch; ``cpu_s``: CPU seconds its threads used (all cores) in the epoch."""
    return {"epoch_time": epoch_time, "train_time": train_time, "cpu_s": cpu_s,
            "val_time": max(0.0, epoch_time - train_time), "wait_s": wait_s,
            "samples": samples, "peak_rss_mb": peak_rss_mb(), "threads": thread_count()}
