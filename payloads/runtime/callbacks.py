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


class PreemptWatch(keras.callbacks.Callback):
    """Every rank: after each training batch the ranks agree (Horovod's all-reduce, MAX) whether
    one was warned that the job ends soon (SIGUSR1, payloads/runtime/preempt.py); if so rank 0
    checkpoints mid-epoch through the trial core (model, optimizer, every rank's running metric
    sums and RNG states, the loader position) and every rank raises :class:`preempt.Continue`
    on the same batch, which ends ``model.fit`` at once (no validation of a partial epoch, no
    epoch report). A run resumed mid-epoch adds the checkpoint's metric sums to its own after
    the resumed epoch's first batch (Keras resets metrics as an epoch begins; the states of
    Keras' metrics are sums: Mean, accuracy, AUC's counts).

    ``steps``: training batches per epoch; ``resumed``: (epoch, batches of it already trained)
    of this run's first epoch; ``save(epoch, batch, states)``: rank 0's checkpoint;
    ``gather``: the all-gather of Python objects; ``restored``: this rank's saved state."""

    def __init__(self, core: TrialCore, watch: Any, steps: int, resumed: tuple[int, int],
                 save: Callable[[int, int, list[Any]], Any], gather: Callable[[Any], list[Any]],
                 restored: dict[str, Any] | None = None) -> None:
        super().__init__()
        self.core, self.watch, self.steps, self.resumed = core, watch, steps, resumed
        self.save, self.gather, self.restored = save, gather, restored
        self._epoch, self._offset = 0, 0
        self._supports_tf_logs = True

    def _variables(self) -> list[Any]:
        return [v for m in self.model.metrics for v in m.variables]

    def on_epoch_begin(self, epoch: int, logs: dict | None = None) -> None:
        self._epoch = epoch
        self._offset = self.resumed[1] if epoch == self.resumed[0] else 0

    def on_train_batch_end(self, batch: int, logs: dict | None = None) -> None:
        import random

        import numpy as np

        from payloads.runtime import preempt

        if self._offset and self.restored is not None and batch == 0:
            saved, self.restored = self.restored.get("metrics") or [], None
            variables = self._variables()
            if len(saved) == len(variables):  # the epoch's sums before the checkpoint
                for v, s in zip(variables, saved):
                    v.assign_add(s)
        done = self._offset + batch + 1
        if done >= self.steps or not self.watch.due():
            return
        mine = {"metrics": [v.numpy() for v in self._variables()], "numpy": np.random.get_state(),
                "python": random.getstate()}
        states = self.gather(mine)
        epoch = self._epoch
        self.core.continue_later(epoch, done, lambda: self.save(epoch, done, states))
        raise preempt.Continue(f"checkpointed in epoch {epoch + 1} after batch {done}")
