"""metrics.jsonl: every epoch report is appended and fsync'd here before it is posted.

The spool is the record of truth: when the metrics API cannot be reached (a grid node without
outbound network, a restarting server) the controller ingests this file with the outputs.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


class Spool:
    """Append-only JSON-lines file, one report per line, durable once ``append`` returns."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)

    def append(self, report: dict[str, Any]) -> None:
        line = json.dumps(report, sort_keys=True, allow_nan=False) + "\n"
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(line)
            f.flush()
            os.fsync(f.fileno())

    def read(self) -> list[dict[str, Any]]:
        """All complete reports; a torn last line (killed mid-write) is skipped."""
        if not self.path.exists():
            return []
        out = []
        for line in self.path.read_text(encoding="utf-8").splitlines():
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                continue
        return out

    def last_by_epoch(self) -> dict[int, dict[str, Any]]:
        """The latest report of each epoch (a resumed trial may have re-run an epoch)."""
        return {int(r["epoch"]): r for r in self.read() if "epoch" in r}

    def truncate_after(self, epoch: int) -> None:
        """Drop reports of epochs > ``epoch`` (they are re-run after a resume), atomically."""
        keep = [r for r in self.read() if int(r.get("epoch", 0)) <= epoch]
        tmp = self.path.with_suffix(".jsonl.tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            f.writelines(json.dumps(r, sort_keys=True) + "\n" for r in keep)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
