"""One contract for every store backend: SQLite, PostgreSQL and the remote read-only store
(reads through a real `gridml` server over HTTP; its writes are refused with a clear error).

Data is written with the SQL store behind each backend and read back through the backend.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import pytest

from gridml.errors import NotFoundError, StoreError
from gridml.store import EpochReport, open_store
from tests.conftest import database

pytestmark = pytest.mark.service

SPEC = {"search": {"objective": "val_loss", "direction": "minimize", "space": {}}}
BACKENDS = ["sqlite", pytest.param("postgresql", marks=pytest.mark.service), "remote"]


@pytest.fixture(params=BACKENDS)
def stores(request, tmp_path) -> Iterator[tuple[Any, Any]]:
    """(reader: the backend under test, writer: the SQL store that holds its data)."""
    kind = "sqlite" if request.param == "remote" else request.param
    with database(kind, request.getfixturevalue("pg_server"), tmp_path / "g.db") as url:
        writer = open_store(url)
        if request.param != "remote":
            yield writer, writer
            writer.close()
            return
        from gridml.server.embedded import EmbeddedServer

        with EmbeddedServer(url) as server:
            reader = open_store(server.url)
            yield reader, writer
            reader.close()
        writer.close()


def _finished(writer, study_id: int, objective: float | None, state: str = "completed"):
    trial = writer.create_trial(study_id, {"x": str(objective)})
    return writer.update_trial(trial.id, state=state, objective=objective)


def test_studies_by_name_and_id(stores) -> None:
    reader, writer = stores
    study = writer.create_study("alpha", SPEC, "h1")
    writer.create_study("beta", SPEC, "h2")
    assert reader.get_study("alpha").id == study.id
    assert reader.get_study(study.id).name == "alpha"
    assert reader.get_study("alpha").spec == SPEC
    assert [s.name for s in reader.list_studies()] == ["alpha", "beta"]
    with pytest.raises(NotFoundError, match="nosuch"):
        reader.get_study("nosuch")


def test_trials_in_number_order_filtered_and_one_by_one(stores) -> None:
    reader, writer = stores
    study = writer.create_study("t", SPEC, "h")
    for i in range(4):
        writer.create_trial(study.id, {"i": i})
    writer.update_trial(writer.get_trial_by_number(study.id, 2).id, state="running")
    trials = reader.list_trials(study.id)
    assert [t.number for t in trials] == [0, 1, 2, 3]
    assert [t.hparams for t in trials] == [{"i": i} for i in range(4)]
    assert [t.number for t in reader.list_trials(study.id, ("running",))] == [2]
    assert reader.get_trial(trials[1].id).number == 1
    assert reader.get_trial_by_number(study.id, 3).id == trials[3].id
    with pytest.raises(NotFoundError):
        reader.get_trial(2**31 - 2)


def test_more_trials_than_one_page_of_the_api(stores) -> None:
    reader, writer = stores
    study = writer.create_study("many", SPEC, "h")
    for i in range(1003):
        writer.create_trial(study.id, {"i": i})
    assert [t.number for t in reader.list_trials(study.id)] == list(range(1003))


def test_epochs_round_trip_with_non_finite_metrics(stores) -> None:
    reader, writer = stores
    study = writer.create_study("e", SPEC, "h")
    trial = writer.create_trial(study.id, {})
    writer.record_epoch(trial.id, EpochReport(1, {"val_loss": 0.5}, 2.0, input_wait_frac=0.1))
    writer.record_epoch(trial.id, EpochReport(2, {"val_loss": math.nan}, 2.5))
    epochs = reader.list_epochs(trial.id)
    assert [e.epoch for e in epochs] == [1, 2]
    assert epochs[0].metrics == {"val_loss": 0.5} and epochs[0].input_wait_frac == 0.1
    assert math.isnan(epochs[1].metrics["val_loss"])
    assert reader.get_trial(trial.id).epochs_done == 2


def test_best_trial_follows_the_one_rule(stores) -> None:
    reader, writer = stores
    study = writer.create_study("b", SPEC, "h")
    assert reader.best_trial(study) is None
    _finished(writer, study.id, math.nan)
    _finished(writer, study.id, 0.1, state="pruned")
    _finished(writer, study.id, None)
    good = _finished(writer, study.id, 0.4)
    _finished(writer, study.id, 0.4)  # a tie: the lower number wins
    _finished(writer, study.id, 0.9)
    assert reader.best_trial(study).id == good.id
    up = writer.create_study("up", {"search": {**SPEC["search"], "direction": "maximize"}}, "h")
    _finished(writer, up.id, 0.4)
    high = _finished(writer, up.id, 0.9)
    assert reader.best_trial(reader.get_study("up")).id == high.id


def test_writes_work_on_sql_and_are_refused_remotely(stores) -> None:
    reader, writer = stores
    study = writer.create_study("w", SPEC, "h")
    trial = writer.create_trial(study.id, {})
    if reader is writer:
        assert reader.record_epoch(trial.id, EpochReport(1, {"val_loss": 1.0}, 1.0)) is True
        return
    writes = [lambda: reader.create_study("x", SPEC, "h"),
              lambda: reader.create_trial(study.id, {}),
              lambda: reader.update_trial(trial.id, state="running"),
              lambda: reader.set_study_state(study.id, "stopped"),
              lambda: reader.heartbeat(trial.id),
              lambda: reader.record_epoch(trial.id, EpochReport(1, {"val_loss": 1.0}, 1.0))]
    for write in writes:
        with pytest.raises(StoreError, match="read-only") as err:
            write()
        assert reader.url in str(err.value) and err.value.hint
    assert writer.list_epochs(trial.id) == [] and writer.get_trial(trial.id).state == "queued"


def test_open_store_chooses_by_url(tmp_path) -> None:
    from gridml.store.remote import RemoteStore
    from gridml.store.sql import SqlStore

    sql = open_store(f"sqlite:///{tmp_path / 'c.db'}")
    assert isinstance(sql, SqlStore)
    sql.close()
    assert isinstance(open_store("http://127.0.0.1:9"), RemoteStore)
    with pytest.raises(StoreError, match="unknown kind") as err:
        open_store("mysql://somewhere/db")
    assert "sqlite:///" in err.value.hint
