"""Contract tests of the MetricsStore seam on SqlStore.

Parametrised over databases: SQLite always; PostgreSQL too (``service`` marker) on
$GRIDML_TEST_PG_URL or a throwaway server scripts/postgres.sh starts (GRIDML_TEST_PG=0: skip it).
"""

from __future__ import annotations

import math
import multiprocessing
from datetime import UTC
from pathlib import Path

import pytest

from gridml.errors import ConflictError, NotFoundError, StoreError
from gridml.store import EpochReport
from tests.conftest import database

URLS = ["sqlite", pytest.param("postgresql", marks=pytest.mark.service)]


@pytest.fixture(params=URLS)
def store_url(request, tmp_path, monkeypatch):
    monkeypatch.setenv("GRIDML_HOME", str(tmp_path / "home"))
    with database(request.param, request.getfixturevalue("pg_server"), tmp_path / "gridml.db") as url:
        yield url


@pytest.fixture
def store(store_url):
    from gridml.store import open_store

    s = open_store(store_url)
    yield s
    s.close()


def report(epoch: int, loss: float = 0.5, **kw) -> EpochReport:
    return EpochReport(epoch=epoch, metrics={"loss": loss, "val_loss": loss + 0.1},
                       epoch_time=1.5, samples_per_s=1000, **kw)


def test_study_created_and_found_by_name_and_id(store):
    study = store.create_study("demo", {"search": {"objective": "val_loss"}}, "h1")
    assert study.token and study.token.startswith("gms_")
    assert store.get_study("demo").id == study.id
    assert store.get_study(study.id).name == "demo"
    assert store.get_study(str(study.id)).name == "demo"
    assert store.get_study("demo").spec == {"search": {"objective": "val_loss"}}
    assert store.get_study("demo").created.tzinfo is not None
    assert store.check_study_token(study.id, study.token)
    assert not store.check_study_token(study.id, "gms_wrong")
    assert [s.name for s in store.list_studies()] == ["demo"]


def test_unknown_study_names_it_and_how_to_list(store):
    with pytest.raises(NotFoundError) as err:
        store.get_study("nosuch")
    assert "nosuch" in str(err.value) and "gridml status" in err.value.hint


def test_duplicate_study_is_a_conflict(store):
    store.create_study("demo", {}, "h")
    with pytest.raises(ConflictError, match="already exists"):
        store.create_study("demo", {}, "h")


def test_study_state(store):
    study = store.create_study("demo", {}, "h")
    store.set_study_state(study.id, "finished")
    assert store.get_study("demo").state == "finished"
    with pytest.raises(StoreError):
        store.set_study_state(study.id, "bogus")


def test_trials_numbered_in_order_with_tokens(store):
    study = store.create_study("demo", {}, "h")
    trials = [store.create_trial(study.id, {"lr": i / 10}) for i in range(3)]
    assert [t.number for t in trials] == [0, 1, 2]
    assert all(t.token and t.state == "queued" for t in trials)
    assert store.check_trial_token(trials[1].id, trials[1].token)
    assert not store.check_trial_token(trials[0].id, trials[1].token)
    assert store.get_trial_by_number(study.id, 2).id == trials[2].id
    other = store.create_study("other", {}, "h")
    assert store.create_trial(other.id, {}).number == 0


def test_issue_trial_token_revokes_the_old_one(store):
    study = store.create_study("demo", {}, "h")
    trial = store.create_trial(study.id, {})
    new = store.issue_trial_token(trial.id)
    assert new != trial.token
    assert store.check_trial_token(trial.id, new)
    assert not store.check_trial_token(trial.id, trial.token)


def test_tokens_are_stored_hashed(store, store_url):
    import hashlib

    import sqlalchemy as sa

    from gridml.store.sql.engine import normalise_url

    study = store.create_study("demo", {}, "h")
    trial = store.create_trial(study.id, {})
    if store_url.startswith("sqlite"):
        db = Path(store_url.removeprefix("sqlite:///"))
        wal = db.with_name(db.name + "-wal")
        raw = db.read_bytes() + (wal.read_bytes() if wal.exists() else b"")
        assert study.token.encode() not in raw and trial.token.encode() not in raw
    # every database: no column of any row holds a token; the tokens table holds their sha256
    engine = sa.create_engine(normalise_url(store_url))
    try:
        meta = sa.MetaData()
        meta.reflect(engine)
        with engine.connect() as conn:
            cells = [str(v) for table in meta.sorted_tables
                     for row in conn.execute(sa.select(table)) for v in row]
    finally:
        engine.dispose()
    assert "demo" in cells  # the dump reads the stored rows
    assert not [c for c in cells if study.token in c or trial.token in c]
    for token in (study.token, trial.token):
        assert hashlib.sha256(token.encode()).hexdigest() in cells


def test_record_epoch_is_idempotent(store):
    study = store.create_study("demo", {}, "h")
    trial = store.create_trial(study.id, {}, state="submitted")
    assert store.record_epoch(trial.id, report(1)) is True
    assert store.record_epoch(trial.id, report(1)) is False
    with pytest.raises(ConflictError, match="epoch 1"):
        store.record_epoch(trial.id, report(1, loss=0.9))
    assert store.record_epoch(trial.id, report(2, loss=0.4)) is True
    stored = store.get_trial(trial.id)
    assert stored.epochs_done == 2 and stored.state == "running" and stored.started
    assert [e.metrics["loss"] for e in store.list_epochs(trial.id)] == [0.5, 0.4]


def test_record_epoch_normalises_numbers_and_nan(store):
    study = store.create_study("demo", {}, "h")
    trial = store.create_trial(study.id, {})
    first = EpochReport(1, {"loss": 1, "val_loss": float("nan")}, 3, samples_per_s=10)
    again = EpochReport(1, {"val_loss": float("nan"), "loss": 1.0}, 3.0, samples_per_s=10.0)
    assert store.record_epoch(trial.id, first) is True
    assert store.record_epoch(trial.id, again) is False
    (back,) = store.list_epochs(trial.id)
    assert back.metrics["loss"] == 1.0 and math.isnan(back.metrics["val_loss"])


def test_record_epoch_out_of_order_keeps_max(store):
    study = store.create_study("demo", {}, "h")
    trial = store.create_trial(study.id, {})
    for epoch in (3, 1, 2):
        store.record_epoch(trial.id, report(epoch))
    assert store.get_trial(trial.id).epochs_done == 3
    assert [e.epoch for e in store.list_epochs(trial.id)] == [1, 2, 3]


def test_unknown_trial(store):
    with pytest.raises(NotFoundError, match="trial 999"):
        store.record_epoch(999, report(1))
    with pytest.raises(NotFoundError):
        store.get_trial(999)


def test_update_trial_and_outputs(store):
    study = store.create_study("demo", {}, "h")
    trial = store.create_trial(study.id, {"lr": 0.1})
    outputs = [{"did": "user.demo:q.out.t0.model.keras", "bytes": 12, "adler32": "0a0b0c0d"}]
    updated = store.update_trial(trial.id, state="completed", objective=0.25, attempts=1,
                                 external_id="pid:42", outputs=outputs)
    assert (updated.state, updated.objective, updated.attempts) == ("completed", 0.25, 1)
    assert updated.outputs[0]["did"] == outputs[0]["did"]
    assert updated.outputs[0]["name"] == "q.out.t0.model.keras"
    with pytest.raises(StoreError, match="unknown field"):
        store.update_trial(trial.id, colour="red")
    with pytest.raises(StoreError, match="unknown trial state"):
        store.update_trial(trial.id, state="exploded")


def test_list_trials_filters_states(store):
    study = store.create_study("demo", {}, "h")
    _, b, c = (store.create_trial(study.id, {"i": i}) for i in range(3))
    store.update_trial(b.id, state="completed", objective=1.0)
    store.update_trial(c.id, state="failed", error="boom")
    assert [t.number for t in store.list_trials(study.id)] == [0, 1, 2]
    assert [t.id for t in store.list_trials(study.id, ("completed", "failed"))] == [b.id, c.id]
    assert [t.id for t in store.list_trials(study.id, limit=1, offset=1)] == [b.id]
    assert store.count_trials(study.id) == {"queued": 1, "completed": 1, "failed": 1}


def test_heartbeat_marks_running_with_aware_time(store):
    study = store.create_study("demo", {}, "h")
    trial = store.create_trial(study.id, {}, state="submitted")
    store.heartbeat(trial.id)
    beat = store.get_trial(trial.id)
    assert beat.state == "running" and beat.last_heartbeat.tzinfo == UTC


def test_resubmission_restarts_the_heartbeat_clock(store):
    study = store.create_study("demo", {}, "h")
    trial = store.create_trial(study.id, {}, state="submitted")
    store.heartbeat(trial.id)
    assert store.update_trial(trial.id, state="queued").last_heartbeat is not None
    assert store.update_trial(trial.id, state="submitted", attempts=2).last_heartbeat is None


def test_migrations_are_applied_once(store_url):
    from sqlalchemy import text

    from gridml.store import open_store

    first, second = open_store(store_url), open_store(store_url)
    with second.engine.connect() as conn:
        assert conn.execute(text("SELECT version_num FROM alembic_version")).scalar() == "0003"
    first.close()
    second.close()


def test_a_store_at_the_newest_schema_opens_without_alembic(store_url):
    """The head is read from the migration files as Alembic reads it, and a database already
    there is opened with one query: no Alembic import in that process."""
    import subprocess
    import sys

    from alembic.config import Config
    from alembic.script import ScriptDirectory

    from gridml.store import open_store
    from gridml.store.sql.engine import MIGRATIONS, head_revision

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    assert head_revision() == ScriptDirectory.from_config(cfg).get_current_head()
    open_store(store_url).close()  # created and migrated here
    probe = ("import sys; from gridml.store import open_store; s = open_store(sys.argv[1]); "
             "s.list_studies(); s.close(); print('alembic' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", probe, store_url], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "False", out.stderr[-2000:]


def _writer(url: str, study_id: int, n: int) -> None:
    from gridml.store import open_store

    store = open_store(url)
    for i in range(n):
        trial = store.create_trial(study_id, {"i": i})
        store.record_epoch(trial.id, report(1))
        store.heartbeat(trial.id)
    store.close()


def test_several_processes_share_one_database(store, store_url):
    """Controller and server workers write the same database at once: nothing lost or doubled."""
    study = store.create_study("demo", {}, "h")
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(store_url, study.id, 15)) for _ in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0, 0, 0]
    trials = store.list_trials(study.id)
    assert sorted(t.number for t in trials) == list(range(45))
    assert all(t.epochs_done == 1 for t in trials)


def test_record_epochs_in_one_batch(store):
    """The server's group commit: new, repeated, conflicting and unknown in one transaction."""
    study = store.create_study("demo", {}, "h")
    a, b = store.create_trial(study.id, {}), store.create_trial(study.id, {})
    store.record_epoch(a.id, report(1))
    results = store.record_epochs([(a.id, report(1)), (a.id, report(2)), (b.id, report(1)),
                                   (a.id, report(2)), (a.id, report(2, loss=0.9)),
                                   (a.id, report(1, loss=0.7)), (999, report(1))])
    assert results[:4] == [False, True, True, False]
    assert isinstance(results[4], ConflictError) and isinstance(results[5], ConflictError)
    assert isinstance(results[6], NotFoundError)
    assert store.get_trial(a.id).epochs_done == 2 and store.get_trial(b.id).epochs_done == 1
    assert [e.epoch for e in store.list_epochs(a.id)] == [1, 2]


def test_migrations_match_the_models(tmp_path):
    """Alembic's autogenerate finds nothing to add: the tables are what models.py declares."""
    from alembic.autogenerate import compare_metadata
    from alembic.migration import MigrationContext

    from gridml.store import open_store
    from gridml.store.sql.models import Base

    store = open_store(f"sqlite:///{tmp_path / 'm.db'}")
    with store.engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn), Base.metadata)
    store.close()
    assert diff == []


def test_migration_0002_keeps_old_trials_and_stores_objectives(tmp_path, monkeypatch):
    """A database of revision 0001 with a finished trial: upgraded on open, the trial reads back
    with no objectives; a new trial keeps its objectives and violations (infeasible: never best)."""
    from alembic import command
    from alembic.config import Config
    from sqlalchemy import create_engine, text

    from gridml.store import open_store
    from gridml.store.sql.engine import MIGRATIONS

    monkeypatch.setenv("GRIDML_HOME", str(tmp_path / "home"))
    url = f"sqlite:///{tmp_path / 'old.db'}"
    engine = create_engine(url)
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "0001")
        conn.execute(text("INSERT INTO studies (id, name, spec, spec_hash, state, created) VALUES "
                          "(1, 'old', '{}', 'h', 'running', '2026-01-01')"))
        conn.execute(text("INSERT INTO trials (id, study_id, number, hparams, state, objective, "
                          "epochs_done, source, attempts, created) VALUES (1, 1, 0, '{}', "
                          "'completed', 0.5, 1, 'searcher', 1, '2026-01-01')"))
    engine.dispose()
    store = open_store(url)
    old = store.get_trial(1)
    assert (old.objective, old.objectives, old.violations) == (0.5, None, None)
    new = store.create_trial(1, {"x": 1})
    got = store.update_trial(new.id, state="completed", objective=0.1, objectives=[0.1, 2.0],
                             violations=[0.5])
    assert (got.objectives, got.violations) == ([0.1, 2.0], [0.5])
    assert store.best_trial(store.get_study("old")).id == old.id  # 0.1 is lower but infeasible
    store.close()


def test_migration_0003_keeps_old_trials_and_stores_test_metrics(tmp_path, monkeypatch):
    """A database of revision 0002 with a finished trial opens (upgraded to 0003): the trial
    reads back with no test metrics; test metrics (non-finite ones too) are stored apart from
    the objective and read back."""
    import math

    from alembic import command
    from alembic.config import Config
    from sqlalchemy import create_engine, text

    from gridml.store import open_store
    from gridml.store.sql.engine import MIGRATIONS

    monkeypatch.setenv("GRIDML_HOME", str(tmp_path / "home"))
    url = f"sqlite:///{tmp_path / 'old.db'}"
    engine = create_engine(url)
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "0002")
        conn.execute(text("INSERT INTO studies (id, name, spec, spec_hash, state, created) VALUES "
                          "(1, 'old', '{}', 'h', 'running', '2026-01-01')"))
        conn.execute(text("INSERT INTO trials (id, study_id, number, hparams, state, objective, "
                          "epochs_done, source, attempts, created) VALUES (1, 1, 0, '{}', "
                          "'completed', 0.5, 1, 'searcher', 1, '2026-01-01')"))
    engine.dispose()
    store = open_store(url)
    assert store.get_trial(1).test_metrics is None
    got = store.update_trial(1, test_metrics={"auc": 0.8, "rejection_at_50": float("inf"),
                                              "loss": float("nan")})
    assert got.objective == 0.5 and got.test_metrics["auc"] == 0.8
    assert got.test_metrics["rejection_at_50"] == float("inf")
    assert math.isnan(got.test_metrics["loss"])
    store.close()
