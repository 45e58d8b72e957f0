"""The suite's pytest-xdist scheduler (scripts/test.sh: ``-n 2 --dist loadfile``; the hook is in
tests/conftest.py): a test module is one unit of work, never split between workers, so its
module fixtures (a whole campaign in most e2e modules) are built once.

``--dist worksteal`` split modules: a worker that ran dry stole the tail of the other's queue,
and with it the last tests of a module whose fixture the other worker had already built, so
the thief built it again (the e2e campaign, PanDA and phpo modules: ~9 min of the suite's
summed time was second builds of one fixture).

The units go in the suite's folder order (tests/suite_rules.py: unit, integration, then e2e and
slurm alternately; the unit tests still run, and fail, first), and inside a folder the longest
module first
(tests/module_seconds.json, measured), so the last units to start are short ones and the two
workers end close together. A module missing from that file counts ``DEFAULT_S``. Refresh the
file from a JUnit report of a whole run::

    python -m pytest ... --junitxml=/tmp/suite.xml && python -m tests.xdist_modules /tmp/suite.xml
"""

from __future__ import annotations

import collections
import itertools
import json
import sys
import xml.etree.ElementTree as ET
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from tests.suite_rules import folder_rank

SECONDS_FILE = Path(__file__).with_name("module_seconds.json")
DEFAULT_S = 20.0  # a module not measured yet: between the many short and the few long ones


def module_of(nodeid: str) -> str:
    """The test file of a node id (``tests/e2e/test_campaign.py::test_x[a]`` -> the file)."""
    return nodeid.split("::", 1)[0]


def load_seconds(path: Path = SECONDS_FILE) -> dict[str, float]:
    try:
        return {str(k): float(v) for k, v in json.loads(path.read_text()).items()}
    except (OSError, ValueError, AttributeError):
        return {}


def dispatch_key(module: str, position: int, seconds: dict[str, float]) -> tuple[int, float, int]:
    """Which unit goes first: the earlier folder, then the longer module, then the suite's own
    order (``position``: the module's first test's index in it)."""
    return (folder_rank(Path(module)), -seconds.get(module, DEFAULT_S), position)


INTERLEAVED = ("e2e", "slurm")  # the last two folders, handed out alternately


def dispatch_order(modules: Iterable[str], seconds: dict[str, float]) -> list[str]:
    """``modules`` (in the suite's order) in the order their units are handed out: the e2e and
    the Slurm modules alternately, each folder's longest first. A Slurm module mostly waits on
    Slurm (its worker used 0.2-0.3 of a core), an e2e module is CPU-bound: one beside the other
    fills both cores, where the two workers both in Slurm modules left the last ~5 minutes of a
    run half idle. The two folders' summed times are about equal (15.3 and 15.4 min)."""
    first = {m: i for i, m in reversed(list(enumerate(modules)))}
    ordered = sorted(first, key=lambda m: dispatch_key(m, first[m], seconds))
    ranks = [folder_rank(Path(f"tests/{name}/x.py")) for name in INTERLEAVED]
    head = [m for m in ordered if folder_rank(Path(m)) not in ranks]
    lanes = [[m for m in ordered if folder_rank(Path(m)) == r] for r in ranks]
    mixed = [m for pair in itertools.zip_longest(*lanes) for m in pair if m is not None]
    tail = [m for m in head if folder_rank(Path(m)) > max(ranks)]  # anything after the folders
    return [m for m in head if m not in tail] + mixed + tail


def seconds_from_junit(report: Path) -> dict[str, float]:
    """Each module's summed test time (setup included) in a JUnit report, rounded to 1 s."""
    total: dict[str, float] = collections.defaultdict(float)
    for case in ET.parse(report).getroot().iter("testcase"):
        parts = (case.get("classname") or "").split(".")
        if len(parts) >= 3 and parts[0] == "tests":
            total["/".join(parts[:3]) + ".py"] += float(case.get("time") or 0)
    return {m: round(s) for m, s in sorted(total.items()) if s >= 1}


def make_scheduler(config: Any, log: Any) -> Any:
    """The scheduler for ``--dist loadfile`` (xdist's own, with the units in dispatch_order)."""
    from xdist.scheduler import LoadFileScheduling

    class ModuleScheduling(LoadFileScheduling):  # type: ignore[misc]
        def __init__(self, config: Any, log: Any) -> None:
            super().__init__(config, log)
            self._rank: dict[str, int] | None = None

        def _split_scope(self, nodeid: str) -> str:
            return module_of(nodeid)

        def _assign_work_unit(self, node: Any) -> None:
            """xdist's, but the unit taken is the first in dispatch_order, not the queue's."""
            if self._rank is None:
                order = dispatch_order(self.workqueue, load_seconds())
                self._rank = {m: i for i, m in enumerate(order)}
            scope = min(self.workqueue, key=self._rank.__getitem__)
            self.workqueue.move_to_end(scope, last=False)
            super()._assign_work_unit(node)

    return ModuleScheduling(config, log)


if __name__ == "__main__":  # python -m tests.xdist_modules REPORT.xml: refresh the measured file
    SECONDS_FILE.write_text(json.dumps(seconds_from_junit(Path(sys.argv[1])), indent=1) + "\n")
    print(f"wrote {SECONDS_FILE}")
