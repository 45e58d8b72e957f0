"""Keras callbacks of the payload: profile, then the trial core's end of epoch (report and
checkpoint on rank 0, should-stop on every rank: payloads/runtime/core.py).

Order in ``model.fit(callbacks=...)`` matters: Horovod's MetricAverageCallback first (it averages
``logs`` over ranks in place), then :class:`EpochProfiler` (a collective: every rank calls it),
then :class:`EpochReporter` (rank 0 spools and posts, then every rank learns whether to stop).
"""

from __future__ import annotations

import time
from typing import Any
from collections.abc import Callable

from tensorflow import keras

from payloads.runtime import profile
from payloads.runtime.core import TrialCore


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


class EpochReporter(keras.callbacks.Callback):
    """Every rank: hand the epoch to the trial core (rank 0 reports and checkpoints there), and
    stop training when the core says so."""

    def __init__(self, core: TrialCore, profiler: EpochProfiler,
                 extra: Callable[[], dict[str, Any]] | None = None) -> None:
        super().__init__()
        self.core, self.profiler, self.extra = core, profiler, extra or dict
        # the batch hook below ignores its logs: Keras need not turn them into numbers (a sync)
        self._supports_tf_logs = True

    def on_epoch_begin(self, epoch: int, logs: dict | None = None) -> None:
        self.core.begin_epoch(epoch + 1, (self.params or {}).get("steps"))

    def on_train_batch_end(self, batch: int, logs: dict | None = None) -> None:
        self.core.batch_done()  # progress.json (rank 0, every few seconds): stall detection

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        if not self.core.end_epoch(epoch + 1, dict(logs or {}), self.profiler.last, self.extra):
            self.model.stop_training = True
