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


INPUT_BOUND = 0.2  # input-wait fraction above which an epoch is called input-bound


def input_bound_reason(report: dict[str, Any], cache: dict[str, Any] | None) -> str | None:
    """Why an epoch waited for input, and what to change; None when it did not (<= 20%)."""
    frac = report.get("input_wait_frac") or 0.0
    if frac <= INPUT_BOUND:
        return None
    waits = report.get("extra", {}).get("wait_s_per_rank", [])
    worst = max(range(len(waits)), key=waits.__getitem__) if waits else 0
    text = f"rank {worst} waited {100 * frac:.0f}% of the epoch for its next batch"
    if cache and cache.get("hit_rate") is not None and cache["hit_rate"] < 0.9:
        return (text + f"; RAM cache hit rate {cache['hit_rate']:.0%} with {cache['used_mb']} of "
                f"{cache['budget_mb']} MB used: raise training.cache_budget_mb, or store the "
                "files uncompressed or with a faster filter (lzf) if they are gzip")
    return text + ("; all reads hit the RAM cache, so the per-batch cost is in the pipeline: "
                   "raise training.batch_size or training.prefetch_batches")


def rank_profile(epoch_time: float, train_time: float, wait_s: float, samples: int,
                 cpu_s: float = 0.0) -> dict:
    """This rank's epoch; ``cpu_s``: CPU seconds its threads used (all cores) in the epoch."""
    return {"epoch_time": epoch_time, "train_time": train_time, "cpu_s": cpu_s,
            "val_time": max(0.0, epoch_time - train_time), "wait_s": wait_s,
            "samples": samples, "peak_rss_mb": peak_rss_mb(), "threads": thread_count()}
