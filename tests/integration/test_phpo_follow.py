"""Following a phpo task from the campaign loop (no evaluation runs: the double's queue is held):
the first cycle submits the study's one task through panda-client and journals it; a restarted
controller (fresh executor and campaign) follows the same task; with the journal lost, PanDA's
duplicate answer leads to the same task; no trial is made before an evaluation ends."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from gridml import assemble
from gridml.layout import RunsLayout
from gridml.settings import settings
from gridml.spec import load_spec
from gridml.store import open_store
from tests.panda_double import PandaDouble
from tests.panda_double.campaign import panda_spec, register_sample_data

pytestmark = [pytest.mark.slow]


def phpo_campaign(spec: Path):
    """The campaign as `gridml submit` assembles it: its phpo study driver, its journal folder."""
    campaign, backend = assemble.campaign(load_spec(spec), open_store(settings().db_url),
                                          RunsLayout(settings().runs_dir))
    assert campaign.executor is None and backend.driver is campaign.driver
    return campaign


def test_a_restarted_controller_follows_the_same_task(tmp_path: Path, gridml_home: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    train, val = register_sample_data(tmp_path, n_train=200, n_val=100, files=1)
    spec = panda_spec(tmp_path, "held", train, val,
                      backend="backend: {executor: phpo, data: local, server: embedded}\n")
    with PandaDouble(tmp_path / "panda") as panda:
        for key, value in panda.client_env().items():
            monkeypatch.setenv(key, value)
        panda.jedi.hold = True  # ready, never running: no evaluation job
        first = phpo_campaign(spec)
        assert first.step() is False
        noted = json.loads((settings().runs_dir / "held" / "phpo" / "panda.json").read_text())
        assert panda.jedi.inserts == 1 and noted["jediTaskID"] in panda.jedi.tasks
        assert noted["taskName"] == "user.jtester.held.phpo/"
        again = phpo_campaign(spec)  # a restarted controller
        assert again.step() is False and again.step() is False
        assert panda.jedi.inserts == 1
        (settings().runs_dir / "held" / "phpo" / "panda.json").unlink()  # the journal is lost
        third = phpo_campaign(spec)
        assert third.step() is False
        assert panda.jedi.inserts == 2 and len(panda.jedi.tasks) == 1  # duplicate: followed
        noted = json.loads((settings().runs_dir / "held" / "phpo" / "panda.json").read_text())
        assert noted["jediTaskID"] in panda.jedi.tasks
        assert third.store.list_trials(third.study.id) == []


def test_the_dry_run_takes_the_real_path_with_a_client_that_submits_nothing(
        tmp_path: Path, gridml_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`gridml submit --dry-run` is the real campaign's first cycle with a rendering client: the
    same task parameters reach PanDA in the real run, the driver journals the dry task as it does
    a real one (a second cycle renders nothing new), and no trial is made."""
    train, val = register_sample_data(tmp_path, n_train=200, n_val=100, files=1)
    spec = panda_spec(tmp_path, "same", train, val,
                      backend="backend: {executor: phpo, data: local, server: embedded}\n")
    with PandaDouble(tmp_path / "panda") as panda:
        for key, value in panda.client_env().items():
            monkeypatch.setenv(key, value)
        panda.jedi.hold = True
        dry_layout = RunsLayout(tmp_path / "dry-runs")
        dry, backend = assemble.campaign(load_spec(spec), open_store(settings().db_url),
                                         dry_layout, dry_run=True)
        assert dry.step() is False and dry.step() is False
        assert backend.rendered is not None and len(backend.rendered) == 1
        noted = json.loads((dry_layout.study("same").phpo / "panda.json").read_text())
        assert noted["taskName"] == "user.jtester.same.phpo/"
        assert panda.jedi.inserts == 0 and dry.store.list_trials(dry.study.id) == []
        real = phpo_campaign(spec)
        assert real.step() is False
        assert panda.jedi.inserts == 1
        (task,) = panda.jedi.tasks.values()
        got = {k: v for k, v in task.params.items() if k not in ("userName", "taskType")}
        assert normalised(got) == normalised(backend.rendered[0])


def normalised(params: dict) -> dict:
    """The task parameters with the sandbox's name (its content hash: the trial document in it
    names the runs folder) left out."""
    return json.loads(re.sub(r"jobO\.gridml-[0-9a-f]{16}\.tar\.gz", "SANDBOX", json.dumps(params)))
