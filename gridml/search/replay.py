"""Replay an early-stopping rule over recorded learning curves (tests and benchmarks/search.py).

A campaign is simulated with ``parallel`` trials at once, every epoch taking the same time: the
trials start in order; after each epoch a running trial asks :func:`gridml.search.stopping.decide`
with the curves the store would hold at that moment (finished and pruned trials up to where they
ended, running ones up to their current epoch), exactly as the server's should-stop route does.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gridml.search.stopping import decide


@dataclass
class Replay:
    epochs_run: int
    epochs_total: int
    pruned: dict[int, str] = field(default_factory=dict)  # trial index -> reason
    ran: dict[int, int] = field(default_factory=dict)  # trial index -> epochs it ran

    @property
    def saved(self) -> float:
        """Fraction of the epochs of the full campaign that were not run."""
        return 1.0 - self.epochs_run / self.epochs_total if self.epochs_total else 0.0


def replay(rule: Mapping[str, Any] | None, curves: Sequence[Sequence[float]], parallel: int,
           direction: str = "minimize") -> Replay:
    """Run the campaign of ``curves`` under ``rule``; see the module docstring."""
    done: dict[int, int] = {}  # trial -> epochs reported so far
    running: list[int] = []
    result = Replay(0, sum(len(c) for c in curves))
    queue = list(range(len(curves)))
    while queue or running:
        while queue and len(running) < parallel:
            running.append(queue.pop(0))
            done[running[-1]] = 0
        for t in list(running):
            done[t] += 1
            result.epochs_run += 1
            others = [curves[o][: done[o]] for o in done if o != t]
            stop, reason = decide(rule, curves[t][: done[t]], others, direction)
            if stop and done[t] < len(curves[t]):
                result.pruned[t] = reason
            if stop or done[t] == len(curves[t]):
                running.remove(t)
                result.ran[t] = done[t]
    return result


def best_index(curves: Sequence[Sequence[float]], direction: str = "minimize") -> int:
    """The trial whose best epoch is best over the full curves."""
    sign = -1.0 if direction == "maximize" else 1.0
    return min(range(len(curves)), key=lambda i: min(sign * v for v in curves[i]))
