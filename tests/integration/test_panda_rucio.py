"""PanDA with Rucio: the pilot stages a task's inputs in from, and its outputs out to, the real
Rucio server the suite starts; the executor finds the trial's files there.

A cheap job stands in for the payload (it checks its inputs and writes what the payload writes),
so the test is about data movement: input datasets -> job directory, outputs -> the task's
output containers in the user's scope, a log tarball -> the log container.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gridml import executors
from gridml.executors.panda import client as panda_client
from gridml.executors.panda import journal
from gridml.executors.panda.render import PandaTask, pack, render_task_params
from tests.panda_double import PandaDouble

pytestmark = [pytest.mark.service, pytest.mark.slow]
FILES = ("model.keras", "curves.png", "metrics.jsonl", "provenance.json", "result.json",
         "model_source.py")


@pytest.fixture
def panda(rucio_store: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[PandaDouble]:
    from gridml.data.rucio import RucioStore

    monkeypatch.setenv("GRIDML_DATA_BACKEND", "rucio")
    with PandaDouble(tmp_path / "panda", data=RucioStore) as double:
        for key, value in double.client_env().items():
            monkeypatch.setenv(key, value)
        yield double


def test_inputs_come_from_rucio_and_outputs_land_in_the_users_scope(
        panda: PandaDouble, rucio_store: Any, tmp_path: Path) -> None:
    scope = rucio_store.test_scope  # user.jdoe
    nick = scope.split(".", 1)[1]
    for name, payload in (("pr.train", b"t" * 1000), ("pr.val", b"v" * 500)):
        (tmp_path / f"{name}.h5").write_bytes(payload)
        rucio_store.upload([tmp_path / f"{name}.h5"], f"{scope}:{name}")
    doc = {"study": "pr", "output_dir": str(tmp_path / "trial-0007" / "outputs")}
    job = ("test -s pr.train.h5 && test -s pr.val.h5 && echo %IN %IN2 > payload.log && "
           "printf '{\"epoch\": 1}\\n' > metrics.jsonl && echo '{}' > result.json && "
           "echo m > model.keras && echo p > curves.png && echo '{}' > provenance.json && "
           "echo s > model_source.py && "
           f"true --trial {pack(json.dumps(doc).encode())}")
    task = PandaTask(nickname=nick, study="pr", trial_number=7, train=[f"{scope}:pr.train"],
                     validation=[f"{scope}:pr.val"], n_train=1, n_validation=1, command=job)
    params = render_task_params(task)
    task_id, _ = panda_client.submit(params)
    # what the executor journals when it submits: the task's parameters and the output folder
    journal.write_task(tmp_path / "journal", task_id, params, tmp_path / "trial-0007" / "outputs")
    assert panda.jedi.wait(task_id, ("done", "failed"), timeout_s=120) == "done", \
        panda.jedi.get(task_id).error
    executor = executors.create("panda", data=rucio_store, journal=tmp_path / "journal")
    status = executor.poll(f"panda:{task_id}")  # a fresh executor: the journal knows the task
    assert status.state == "completed", status
    stored = {o["name"]: o for o in status.stored_outputs or []}
    assert set(stored) == {f"user.{nick}.{task_id}._000001.{f}" for f in FILES}
    assert all(o["did"].startswith(f"{scope}:") for o in stored.values())
    container = f"{scope}:user.{nick}.pr.trial-0007_model.keras"
    assert [f.did.name for f in rucio_store.list_files(container)] == \
        [f"user.{nick}.{task_id}._000001.model.keras"]
    logs = rucio_store.list_files(f"{scope}:user.{nick}.pr.trial-0007.log")
    assert [f.did.name for f in logs] == [f"user.{nick}.pr.trial-0007.log.{task_id}.000001.log.tgz"]
    outputs = tmp_path / "trial-0007" / "outputs"
    assert (outputs / "metrics.jsonl").read_text() == '{"epoch": 1}\n'
    log = (panda.jedi.get(task_id).jobs[0].workdir / "payload.log").read_text()
    assert log.split() == ["pr.train.h5", "pr.val.h5"]  # runGen's %IN / %IN2: staged file names
