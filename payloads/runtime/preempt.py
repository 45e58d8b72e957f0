"""The warning before a job ends (preemption, walltime): SIGUSR1 asks the trial to checkpoint at
its next batch boundary and leave with :data:`payloads.runtime.errors.CONTINUE_CODE`.

Slurm sends ``USR1`` to the batch shell ``slurm.signal_grace`` seconds before the job's end
(``#SBATCH --signal=B:USR1@<grace>``, gridml/executors/slurm/render.py); the shell forwards it
to the ranks of its node, never to the launcher (torchrun, horovodrun and mpirun would end their
ranks on it). It finds them by the files each rank writes once its handler is installed:
``$GRIDML_SIGNAL_DIR/<node>.<pid>`` (``<node>``: ``$SLURMD_NODENAME``, else the host name), so a
signal never reaches a rank that would die of it. One rank told is enough: at each check every
rank contributes its flag to one all-reduce (MAX) through the framework's own collective
(torch.distributed or Horovod), so all stop after the same batch (:class:`Watch`).

Imports neither torch nor TensorFlow.
"""

from __future__ import annotations

import atexit
import logging
import os
import signal
import socket
import time
from pathlib import Path
from typing import Any
from collections.abc import Callable

log = logging.getLogger("gridml.payload")

ENV_DIR = "GRIDML_SIGNAL_DIR"
_asked: list[float] = []  # when the signal came (monotonic), empty: not asked


class Continue(Exception):
    """Raised on every rank on the batch they agreed on, once the checkpoint is on disk: ends
    the framework's training loop at once (Keras' ``model.fit``)."""


def _handler(signum: int, frame: Any) -> None:
    if not _asked:
        _asked.append(time.monotonic())


def install() -> Path | None:
    """Catch SIGUSR1 (from now on it only sets the flag), then advertise this rank's pid for
    the batch shell's forwarding. Returns the pid file written (None: none asked for)."""
    if not hasattr(signal, "SIGUSR1"):
        return None
    signal.signal(signal.SIGUSR1, _handler)
    folder = os.environ.get(ENV_DIR)
    if not folder:
        return None
    node = os.environ.get("SLURMD_NODENAME") or socket.gethostname()
    path = Path(folder) / f"{node}.{os.getpid()}"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("")
    except OSError as exc:  # the trial runs on; it only cannot be warned
        log.warning("cannot write %s (%s): this rank will not hear a preemption warning", path, exc)
        return None
    atexit.register(path.unlink, missing_ok=True)  # no signal for a pid this rank left behind
    if (path.parent / "warned").exists():  # the warning came while this rank was starting
        _handler(signal.SIGUSR1, None)
    return path


def can_be_warned() -> bool:
    """A warning can reach the ranks: the batch shell forwards one to them (``$GRIDML_SIGNAL_DIR``,
    set where Slurm is asked for one: ``slurm.signal_grace``). Elsewhere the training loops skip
    the per-batch agreement (an all-reduce per batch, and Keras' per-batch callback, slowed CPU
    epochs); every rank sees the same environment, so the collectives stay matched."""
    return bool(os.environ.get(ENV_DIR))


def asked() -> bool:
    """This rank received SIGUSR1."""
    return bool(_asked)


def asked_at() -> float | None:
    return _asked[0] if _asked else None


def reset() -> None:
    """Forget a signal (tests; a payload run twice in one process)."""
    _asked.clear()


class Watch:
    """Every ``every`` training batches, all ranks agree whether any was signalled.

    ``any_rank(flag) -> bool``: the framework's all-reduce (MAX) of this rank's flag. The check
    is on the same batches on every rank (a batch count, never a clock), so the collectives
    match; ``every`` > 1 spares GPU loops a host sync each step."""

    def __init__(self, any_rank: Callable[[bool], bool], every: int = 1) -> None:
        self.any_rank, self.every = any_rank, max(1, int(every))
        self.count = 0
        self.enabled = can_be_warned()

    def due(self) -> bool:
        """After a training batch: True when the ranks agreed to stop here (every rank gets the
        same answer on the same batch). Where no warning can come, no collective at all."""
        self.count += 1
        if not self.enabled or self.count % self.every:
            return False
        return bool(self.any_rank(asked()))
