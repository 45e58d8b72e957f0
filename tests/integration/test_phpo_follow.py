"""Following a phpo task from the campaign loop (no evaluation runs: the double's queue is held):
the first cycle submits the study's one task through panda-client and journals it; a restarted
controller (fresh executor and campaign) follows the same task; with the journal lost, PanDA's
duplicate answer leads to the same task; no trial is made before an evaluation ends."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gridml import executors
from gridml.data import open_data_manager
from gridml.settings import settings
from tests.panda_double import PandaDouble
from tests.panda_double.campaign import make_campaign, panda_spec, register_sample_data

pytestmark = [pytest.mark.slow]


def phpo_campaign(spec: Path):
    data = open_data_manager("local")
    ex = executors.create("phpo", data=data, journal=settings().runs_dir / ".journal" / "phpo")
    return make_campaign(spec, executor=ex)


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
