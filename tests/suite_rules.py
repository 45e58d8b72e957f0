"""Rules of the whole suite, as pytest hooks (tests/conftest.py imports them):

- the fast tests first: tests/unit, then tests/integration, then tests/e2e, then tests/slurm
  (a broken unit test shows in the first minute, not after the campaigns); the order inside a
  folder is pytest's own; on two workers the scheduler hands out the e2e and the Slurm modules
  alternately (tests/xdist_modules.py: a waiting Slurm module beside a CPU-bound e2e one);
- run in parallel (scripts/test.sh: pytest-xdist, ``-n 2 --dist loadfile`` with the suite's own
  scheduler, tests/xdist_modules.py): a module is one unit, never split between the workers (a
  split module builds its campaign fixture twice), the folders in the order above (e2e and slurm alternately), the longest
  module of a folder first (tests/module_seconds.json). (Not ``loadgroup``: pytest 9 keeps a
  node's id where xdist 3.8 no longer sets it, so its groups are ignored.) The Slurm cluster and
  the Rucio server are session fixtures: each worker that runs one of their tests starts its own (keyed by its own folder, so two never collide);
- in CI (``CI`` set) a test skipped because torch cannot be imported is a failure: CI installs
  torch, so that skip means a broken environment, never a test to leave out quietly. A module
  that skips itself at import (``pytest.importorskip("torch")`` at the top) is a collection error
  there. Anywhere else (a torch-free developer machine) it stays a skip.
"""

from __future__ import annotations

import os
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest

# Folders under tests/ in the order they run; anything else runs last.
FOLDER_ORDER = ("unit", "integration", "e2e", "slurm")


def folder_rank(path: Path) -> int:
    """Where a test file's folder under a ``tests`` folder comes in FOLDER_ORDER
    (len(FOLDER_ORDER): anywhere else)."""
    parts = path.parts
    for i in range(len(parts) - 2, -1, -1):  # the innermost tests/<folder>/
        if parts[i] == "tests" and parts[i + 1] in FOLDER_ORDER:
            return FOLDER_ORDER.index(parts[i + 1])
    return len(FOLDER_ORDER)


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config,
                                  items: list[pytest.Item]) -> None:
    items.sort(key=lambda item: folder_rank(item.path))  # stable: a folder's own order stays


def torch_skip_reason(report: pytest.CollectReport | pytest.TestReport) -> str | None:
    """The reason of ``report``'s skip where torch could not be imported, else None."""
    if not report.skipped or hasattr(report, "wasxfail"):
        return None
    longrepr: Any = report.longrepr
    reason = str(longrepr[2]) if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)
    if "could not import 'torch" in reason or "No module named 'torch" in reason:
        return reason
    return None


def _fail_in_ci(report: pytest.CollectReport | pytest.TestReport) -> None:
    reason = torch_skip_reason(report) if os.environ.get("CI") else None
    if reason is not None:
        report.outcome = "failed"
        report.longrepr = (f"a torch test would be skipped in CI ({reason}): CI installs torch, "
                           "so its absence is a broken environment (scripts/setup.sh)")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, None]:
    outcome = yield
    _fail_in_ci(outcome.get_result())


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> Generator[None, Any, None]:
    outcome = yield
    _fail_in_ci(outcome.get_result())
