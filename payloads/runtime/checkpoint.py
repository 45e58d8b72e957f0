"""Checkpoints (rank 0) written atomically, and the position to resume from.

Layout under ``<output_dir>/checkpoint/``: ``epoch-<N>/`` holds a ``tf.train.Checkpoint`` of
the model and optimizer after epoch N; ``step-<N>-<B>/`` one taken in the middle of epoch N
(1-based) after its first B training batches, when the job was told it ends soon (SIGUSR1:
payloads/runtime/preempt.py), with what the rest of the epoch needs beside the model and
optimizer (``extra.pkl``: the ranks' RNG states, their running metric sums, the epoch's time so
far). ``state.json`` names the newest complete one (``epoch``: epochs completed, ``batch``:
batches of the next epoch already trained, 0 for an epoch checkpoint). Each checkpoint is
written into a temporary folder and renamed; ``state.json`` is replaced with ``os.replace``, so
a kill at any moment leaves the previous checkpoint usable.
"""

from __future__ import annotations

import json
import os
import pickle
import shutil
from pathlib import Path
from typing import Any
from collections.abc import Callable

EXTRA = "extra.pkl"


class Checkpointer:
    def __init__(self, directory: str | Path) -> None:
        self.dir = Path(directory)
        self.state_path = self.dir / "state.json"

    def state(self) -> dict[str, Any] | None:
        try:
            state = json.loads(self.state_path.read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            return None
        return state if (self.dir / state["name"]).is_dir() else None

    def position(self) -> tuple[int, int]:
        """(epochs completed, batches of the next epoch trained) of the newest checkpoint."""
        state = self.state() or {}
        return int(state.get("epoch", 0)), int(state.get("batch", 0))

    def extra(self) -> dict[str, Any]:
        """What a mid-epoch checkpoint keeps beside the model ({} for an epoch checkpoint)."""
        state = self.state()
        if state is None or not (self.dir / state["name"] / EXTRA).exists():
            return {}
        with open(self.dir / state["name"] / EXTRA, "rb") as fh:
            return dict(pickle.load(fh))

    def commit(self, name: str, write: Callable[[Path], Any], state: dict[str, Any]) -> Path:
        """``write(folder)`` into a temporary folder, renamed to ``name``; state.json points at it
        (``state`` beside the name); older checkpoints go."""
        tmp, final = self.dir / f".{name}.tmp", self.dir / name
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        write(tmp)
        shutil.rmtree(final, ignore_errors=True)
        os.replace(tmp, final)
        self._write_state({**state, "name": name})
        self._prune(keep=name)
        return final

    def save(self, model: Any, epoch: int, extra: dict[str, Any] | None = None) -> Path:
        """Checkpoint completed epoch ``epoch`` (1-based) and point state.json at it."""
        return self.commit(f"epoch-{epoch}", lambda d: self._write_keras(model, d),
                           {"epoch": epoch, **(extra or {})})

    def save_step(self, model: Any, epoch: int, batch: int, extra: dict[str, Any]) -> Path:
        """Mid-epoch: ``epoch`` epochs completed and ``batch`` batches of the next one trained;
        ``extra`` (picklable) is what the rest of the epoch needs (:meth:`extra`)."""
        def write(d: Path) -> None:
            self._write_keras(model, d)
            _pickle(d / EXTRA, extra)

        return self.commit(f"step-{epoch + 1}-{batch}", write,
                           {"epoch": epoch, "batch": batch, "kind": "step"})

    @staticmethod
    def _write_keras(model: Any, folder: Path) -> None:
        import tensorflow as tf

        tf.train.Checkpoint(model=model, optimizer=model.optimizer).write(str(folder / "ckpt"))

    def drop_step(self) -> None:
        """Remove a mid-epoch checkpoint once its epoch is over and no epoch checkpoint replaced
        it (training.options.checkpoint off): a later attempt must not go back to it."""
        state = self.state()
        if state is not None and state.get("kind") == "step":
            self.state_path.unlink(missing_ok=True)
            shutil.rmtree(self.dir / state["name"], ignore_errors=True)

    def _write_state(self, state: dict[str, Any]) -> None:
        tmp = self.state_path.with_suffix(".json.tmp")
        with open(tmp, "w") as f:
            json.dump(state, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.state_path)

    def _prune(self, keep: str) -> None:
        for pattern in ("epoch-*", "step-*"):
            for p in self.dir.glob(pattern):
                if p.name != keep:
                    shutil.rmtree(p, ignore_errors=True)

    def restore(self, model: Any) -> int:
        """Load the newest checkpoint into ``model``; returns its epoch (0: none, start fresh)."""
        import tensorflow as tf

        state = self.state()
        if state is None:
            return 0
        ckpt = tf.train.Checkpoint(model=model, optimizer=model.optimizer)
        ckpt.read(str(self.dir / state["name"] / "ckpt")).expect_partial()
        return int(state["epoch"])


def _pickle(path: Path, obj: Any) -> None:
    with open(path, "wb") as fh:
        pickle.dump(obj, fh, protocol=pickle.HIGHEST_PROTOCOL)
        fh.flush()
        os.fsync(fh.fileno())
