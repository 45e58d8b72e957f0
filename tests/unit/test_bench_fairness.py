"""The benchmarks' fairness machinery: metrics_api.py's stored-reports check (every report of
every run counted, missing or duplicated ones fail the run) and input_pipeline.py's page-cache
priming (warm: the whole file cached; cold: dropped) that every row, the naive ones too, starts
from."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _load(name: str) -> ModuleType:
    if str(ROOT / "benchmarks") not in sys.path:
        sys.path.insert(0, str(ROOT / "benchmarks"))  # metrics_api imports metrics_api_big
    spec = importlib.util.spec_from_file_location(f"bench_{name}", ROOT / "benchmarks" /
                                                  f"{name}.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _result(acked: dict[str, list[int]], unanswered: dict[str, list[int]] | None = None
            ) -> dict[str, Any]:
    return {"acked": acked, "unanswered": unanswered or {k: [] for k in acked}}


def test_check_stored_counts_each_report_once() -> None:
    m = _load("metrics_api")
    result = _result({"1": [1, 2, 3], "2": [1, 2]}, {"1": [4], "2": []})
    m.check_stored("t", {"1": [1, 2, 3, 4], "2": [1, 2]}, result)  # 4: no reply, stored
    assert (result["acked_total"], result["stored"]) == (5, 6)
    assert "acked" not in result and "unanswered" not in result
    result = _result({"r": [1, 2]})
    m.check_stored("mlflow", {"r": [1] * 4 + [2] * 4}, result, per_report=4)
    assert result["stored"] == 2


@pytest.mark.parametrize("stored, what", [
    ({"1": [1, 2], "2": [1, 2]}, "1 missing"),        # trial 1's epoch 3 lost
    ({"1": [1, 2, 3, 3], "2": [1, 2]}, "1 duplicated"),
    ({"1": [1, 2, 3], "2": [1, 2, 7]}, "1 stored but never sent"),
    ({"1": [1, 2, 3], "2": [1, 2], "3": []}, "trials without a load: ['3']"),
])
def test_check_stored_fails_loudly(stored: dict[str, list[int]], what: str) -> None:
    m = _load("metrics_api")
    with pytest.raises(RuntimeError, match="do not match") as err:
        m.check_stored("t", stored, _result({"1": [1, 2, 3], "2": [1, 2]}))
    assert what in str(err.value)


def test_check_stored_per_metric_rows() -> None:
    """MLflow keeps a row per metric: a report with 3 of its 4 rows is missing, 5 duplicated."""
    m = _load("metrics_api")
    with pytest.raises(RuntimeError, match="1 missing"):
        m.check_stored("m", {"r": [1] * 4 + [2] * 3}, _result({"r": [1, 2]}), per_report=4)
    with pytest.raises(RuntimeError, match="1 duplicated"):
        m.check_stored("m", {"r": [1] * 5 + [2] * 4}, _result({"r": [1, 2]}), per_report=4)


def test_stored_gridml_counts_only_the_runs_trials(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """On a store that also holds the big study, only the run's own trials are counted (the
    big study's rows once made any loss pass), and a lost report fails the check."""
    from gridml.store import EpochReport, open_store

    monkeypatch.setenv("GRIDML_HOME", str(tmp_path / "home"))
    m = _load("metrics_api")
    big = _load("metrics_api_big")
    url = f"sqlite:///{tmp_path / 'b.db'}"
    big.fill_big_study(url, 30, 4)
    trials = m._fill_gridml(url, 2)
    store = open_store(url)
    for epoch in (1, 2):
        store.record_epoch(trials[0]["id"], EpochReport(epoch, {"loss": 1.0}, 1.0))
    store.record_epoch(trials[1]["id"], EpochReport(1, {"loss": 1.0}, 1.0))
    store.close()
    stored = m.stored_gridml(url, trials)
    assert stored == {trials[0]["key"]: [1, 2], trials[1]["key"]: [1]}
    m.check_stored("ok", stored, _result({trials[0]["key"]: [1, 2], trials[1]["key"]: [1]}))
    with pytest.raises(RuntimeError, match="1 missing"):
        m.check_stored("lost", stored, _result({trials[0]["key"]: [1, 2],
                                                trials[1]["key"]: [1, 2]}))


def _fs_type(path: Path) -> str:
    """The type of the file system ``path`` is on (/proc/mounts' longest matching mount)."""
    best, kind = "", ""
    for line in Path("/proc/mounts").read_text().splitlines():
        _dev, mount, fs = line.split()[:3]
        if str(path.resolve()).startswith(mount) and len(mount) > len(best):
            best, kind = mount, fs
    return kind


def test_page_cache_priming(tmp_path: Path) -> None:
    ip = _load("input_pipeline")
    path = tmp_path / "f.h5"
    ip.make_file(path, 0.01, None)
    ip.prime(path, "warm")
    assert ip.resident(path) == 1.0
    ip.prime(path, "cold")
    cold = ip.resident(path)
    if cold > 0.5 and _fs_type(tmp_path) in ("tmpfs", "ramfs"):
        pytest.skip("a memory file system: nothing to drop")
    assert cold < 0.05
    n, _dt = ip.raw(path, "warm")  # a row primes itself right before its clock
    assert n > 0 and ip.resident(path) == 1.0
    ip.raw(path, "cold")
    assert ip.resident(path) > 0.9  # it read the whole file, from disk
