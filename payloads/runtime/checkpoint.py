"""Per-epoch checkpoints (rank 0) written atomically, and the epoch to resume from.

Layout under ``<output_dir>/checkpoint/``: ``epoch-<N>/`` holds a ``tf.train.Checkpoint`` of
the model and optimizer; ``state.json`` names the newest complete one. Each checkpoint is
written into a temporary folder and renamed; ``state.json`` is replaced with ``os.replace``,
so a kill at any moment leaves the previous checkpoint usable.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any


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

    def save(self, model: Any, epoch: int, extra: dict[str, Any] | None = None) -> Path:
        """Checkpoint completed epoch ``epoch`` (1-based) and point state.json at it."""
        import tensorflow as tf

        name = f"epoch-{epoch}"
        tmp, final = self.dir / f".{name}.tmp", self.dir / name
        shutil.rmtree(tmp, ignore_errors=True)
        tf.train.Checkpoint(model=model, optimizer=model.optimizer).write(str(tmp / "ckpt"))
        shutil.rmtree(final, ignore_errors=True)
        os.replace(tmp, final)
        self._write_state({"epoch": epoch, "name": name, **(extra or {})})
        self._prune(keep=name)
        return final

    def _write_state(self, state: dict[str, Any]) -> None:
        tmp = self.state_path.with_suffix(".json.tmp")
        with open(tmp, "w") as f:
            json.dump(state, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.state_path)

    def _prune(self, keep: str) -> None:
        for p in self.dir.glob("epoch-*"):
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
