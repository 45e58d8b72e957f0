"""`gridml status` shows where a running trial is, from the progress.json its payload keeps in
the trial's folder (the live channel through the filesystem: payloads/runtime/channel.py writes
it, gridml/live.py reads it); a finished trial shows none."""

from __future__ import annotations

import json
from pathlib import Path

from gridml.layout import RunsLayout
from gridml.settings import settings
from gridml.store import EpochReport, open_store
from payloads.runtime.channel import Progress
from tests.helpers import gridml


def test_status_shows_a_running_trials_progress(gridml_home: Path) -> None:
    cfg = settings()
    spec = {"search": {"objective": "val_loss", "direction": "minimize", "max_trials": 2,
                       "space": {}}}
    store = open_store(cfg.db_url)
    study = store.create_study("live", spec, "h")
    done = store.create_trial(study.id, {"units": 8})
    store.record_epoch(done.id, EpochReport(1, {"val_loss": 0.5}, 1.0))
    store.update_trial(done.id, state="completed", objective=0.5)
    running = store.create_trial(study.id, {"units": 16})
    store.record_epoch(running.id, EpochReport(1, {"val_loss": 0.4}, 1.0))
    store.update_trial(running.id, state="running")
    store.close()
    paths = RunsLayout(cfg.runs_dir).study("live")
    for number in (done.number, running.number):  # both left a progress.json
        folder = paths.trial(number)
        folder.mkdir(parents=True)
        progress = Progress(folder, every_s=0.0)
        progress.epoch_start(3, 266)
        for _ in range(120):
            progress.batch()
        progress.write()

    doc = json.loads(gridml("status", "live", "--json").stdout)
    by_number = {t["number"]: t for t in doc["trials"]}
    assert by_number[running.number]["progress"]["epoch"] == 3
    assert by_number[running.number]["progress"]["batch"] == 120
    assert by_number[done.number]["progress"] is None  # finished: no progress to show
    table = gridml("status", "live", env={"COLUMNS": "200"}).stdout  # (no wrapping)
    assert "epoch 3, batch 120/266" in table
    assert table.count("epoch 3, batch") == 1
