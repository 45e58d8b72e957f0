"""`gridml submit --dry-run` reads the real store, read-only (issue 24): a valid warm_start is
accepted, a changed spec under a used name is refused, and the store is left as it was."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from gridml.controller import Campaign
from gridml.data.local import LocalStore
from gridml.executors.base import TaskStatus
from gridml.executors.dryrun import DryRunExecutor
from gridml.spec import load_spec
from gridml.store import EpochReport, open_store
from tests.helpers import gridml, register_tiny_datasets, write_spec

SEARCH = """\
search:
  algorithm: random
  objective: val_loss
  max_trials: 2
  parallel: 2
  seed: 7
  {warm}
  space:
    learning_rate: {{type: real, low: 1.0e-3, high: 3.0e-2, log: true}}
    units: {{type: int, low: 8, high: 32}}
"""


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """GRIDML_HOME with the datasets and a study ``base`` of two completed trials."""
    home = tmp_path / "home"
    monkeypatch.setenv("GRIDML_HOME", str(home))
    data = LocalStore(home / "store")
    register_tiny_datasets(data, tmp_path, "user.t")
    spec = write_spec(tmp_path / "base.yaml", "base", "user.t:train", "user.t:val",
                      search=SEARCH.format(warm=""))
    store = open_store(f"sqlite:///{home / 'gridml.db'}")
    c = Campaign(load_spec(spec, did_exists=data.exists), store, DryRunExecutor(), data,
                 home / "runs", api_url="http://127.0.0.1:9", poll_s=0)
    c.step()
    for t in store.list_trials(c.study.id):
        out = home / "runs" / "base" / f"trial-{t.number:04d}" / "outputs"
        out.mkdir(parents=True, exist_ok=True)
        (out / "metrics.jsonl").write_text(json.dumps(
            EpochReport(1, {"loss": 0.3, "val_loss": 0.4 + t.number}, 1.0).to_json()) + "\n")
        c.finalize(t, TaskStatus("completed"))
    store.close()
    return home


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_dry_run_accepts_a_warm_start_from_the_real_store(home: Path, tmp_path: Path) -> None:
    spec = write_spec(tmp_path / "warm.yaml", "warm", "user.t:train", "user.t:val",
                      search=SEARCH.format(warm="warm_start: [base]"))
    before = _digest(home / "gridml.db")
    proc = gridml("submit", str(spec), "--dry-run", "--json", env={"GRIDML_HOME": str(home)},
                  check=False)
    assert proc.returncode == 0, proc.stderr
    assert len(json.loads(proc.stdout)) == 2
    assert _digest(home / "gridml.db") == before  # read, never written
    names = [s.name for s in open_store(f"sqlite:///{home / 'gridml.db'}").list_studies()]
    assert names == ["base"]


def test_dry_run_refuses_a_changed_spec_under_a_used_name(home: Path, tmp_path: Path) -> None:
    spec = write_spec(tmp_path / "base2.yaml", "base", "user.t:train", "user.t:val",
                      search=SEARCH.format(warm="").replace("high: 32", "high: 64"))
    proc = gridml("submit", str(spec), "--dry-run", env={"GRIDML_HOME": str(home)}, check=False)
    assert proc.returncode == 2, proc.stderr
    assert "already exists with a different spec" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_dry_run_without_a_store_creates_none(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "fresh"
    monkeypatch.setenv("GRIDML_HOME", str(home))
    data = LocalStore(home / "store")
    register_tiny_datasets(data, tmp_path, "user.t")
    spec = write_spec(tmp_path / "s.yaml", "fresh", "user.t:train", "user.t:val",
                      search=SEARCH.format(warm=""))
    proc = gridml("submit", str(spec), "--dry-run", "--json", env={"GRIDML_HOME": str(home)},
                  check=False)
    assert proc.returncode == 0, proc.stderr
    assert not (home / "gridml.db").exists()
