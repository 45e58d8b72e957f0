"""Keras callbacks of the payload: profile, report (rank 0), checkpoint (rank 0), should-stop.

Order in ``model.fit(callbacks=...)`` matters: Horovod's MetricAverageCallback first (it averages
``logs`` over ranks in place), then :class:`EpochProfiler` (a collective: every rank calls it),
then :class:`EpochReporter` (rank 0 spools and posts, then every rank learns whether to stop).
"""

from __future__ import annotations

import logging
import math
import time
from typing import Any
from collections.abc import Callable

from tensorflow import keras

from payloads.runtime import profile
from payloads.runtime.checkpoint import Checkpointer
from payloads.runtime.reporter import Reporter

log = logging.getLogger("gridml.payload")


class EpochProfiler(keras.callbacks.Callback):
    """Times each epoch and its input wait on every rank and merges them on all ranks."""

    def __init__(self, loaders: list[Any], gather: Callable[[Any], list[Any]],
                 global_batch_samples: Callable[[], int]) -> None:
        super().__init__()
        self.loaders, self.gather, self.samples = loaders, gather, global_batch_samples
        self.last: dict[str, Any] = {}

    def _wait(self) -> float:
        return sum(ld.wait_s for ld in self.loaders)

    def on_epoch_begin(self, epoch: int, logs: dict | None = None) -> None:
        self._t0, self._cpu0 = time.perf_counter(), time.process_time()
        self._t_train: float | None = None
        self._w0 = self._wait()

    def on_test_begin(self, logs: dict | None = None) -> None:
        """Validation starts: the training part of the epoch is over (no per-batch hook, so
        Keras never has to sync every step for us)."""
        self._t_train = time.perf_counter()

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        now = time.perf_counter()
        train_end = self._t_train if self._t_train is not None else now
        mine = profile.rank_profile(now - self._t0, train_end - self._t0,
                                    self._wait() - self._w0, 0,
                                    time.process_time() - self._cpu0)
        self.last = profile.combine(self.gather(mine), self.samples())


def _number(v: Any) -> float | None:
    """A metric as a JSON number; NaN/inf (a diverged loss) become null, as the API expects."""
    f = float(v)
    return f if math.isfinite(f) else None


class EpochReporter(keras.callbacks.Callback):
    """Rank 0: build the report, spool + post it, checkpoint; all ranks: stop when told."""

    def __init__(self, rank: int, reporter: Reporter | None, profiler: EpochProfiler,
                 checkpointer: Checkpointer | None, broadcast: Callable[[Any], Any],
                 ask_stop: bool, extra: Callable[[], dict[str, Any]] | None = None,
                 costs: dict[str, float] | None = None) -> None:
        super().__init__()
        self.costs = dict(costs or {})  # payloads/runtime/costs.py: in every epoch's metrics
        self.rank, self.reporter, self.profiler = rank, reporter, profiler
        self.ckpt, self.broadcast, self.ask_stop = checkpointer, broadcast, ask_stop
        self.extra = extra or dict
        self.reports: list[dict[str, Any]] = []
        self.stop_reason: str | None = None

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        if self.rank == 0:
            self._report(epoch + 1, dict(logs or {}))
        if self.ask_stop and epoch + 1 < int(self.params.get("epochs") or 0):
            self._maybe_stop(epoch + 1)

    def _report(self, epoch: int, logs: dict[str, Any]) -> None:
        prof = dict(self.profiler.last)
        prof["extra"] = {**prof.get("extra", {}), **self.extra()}
        reason = profile.input_bound_reason(prof, prof["extra"].get("cache"))
        if reason:
            prof["extra"]["input_bound"] = reason
        report = {"epoch": epoch, "metrics": {**{k: _number(v) for k, v in logs.items()},
                                              **self.costs}, **prof}
        self.reports.append(report)
        if self.reporter is not None:
            self.reporter.report(report)
        if self.ckpt is not None:
            self.ckpt.save(self.model, epoch)
        log.info("epoch %d: %s | %.2fs, %.0f samples/s, input wait %.1f%%", epoch,
                 " ".join(f"{k}={v}" if v is None else f"{k}={v:.4g}"
                          for k, v in report["metrics"].items()),
                 prof.get("epoch_time", 0), prof.get("samples_per_s") or 0,
                 100 * (prof.get("input_wait_frac") or 0))

    def _maybe_stop(self, epoch: int) -> None:
        decision = (False, "")
        if self.rank == 0 and self.reporter is not None:
            decision = self.reporter.should_stop()
        stop, reason = self.broadcast(decision)
        if stop:
            self.stop_reason = reason or "the server asked to stop"
            log.info("stopping after epoch %d: %s", epoch, self.stop_reason)
            self.model.stop_training = True
