"""The helpers every backend shares: the journal files, the log tail, the health wait, the
capabilities each backend declares on the seam, and the one layout of the state files."""

from __future__ import annotations

import stat
import time
from pathlib import Path

import pytest

from gridml.executors.journal import HandleIndex, TrialJournal
from gridml.executors.logs import last_error_line, tail
from gridml.layout import RunsLayout
from gridml.server.health import wait_healthy


def test_a_trial_journal_is_rewritten_atomically_and_a_torn_one_reads_as_none(tmp_path: Path) -> None:
    j = TrialJournal("x.json")
    assert j.read(tmp_path) is None
    j.write(tmp_path / "t", {"a": 1})
    j.write(tmp_path / "t", {"a": 2})
    assert j.read(tmp_path / "t") == {"a": 2}
    assert sorted(p.name for p in (tmp_path / "t").iterdir()) == ["x.json"]  # no temp file left
    (tmp_path / "t" / "x.json").write_text('{"a": ')  # torn
    assert j.read(tmp_path / "t") is None


def test_a_handle_index_is_written_once_and_private_when_asked(tmp_path: Path) -> None:
    index = HandleIndex(tmp_path / "journal", private=True)
    index.write_once(17, {"params": {"token": "s3cret"}})
    index.write_once(17, {"params": {"token": "other"}})  # a resubmission changes nothing
    assert index.read(17) == {"params": {"token": "s3cret"}}
    assert stat.S_IMODE((tmp_path / "journal" / "17.json").stat().st_mode) == 0o600
    assert index.read(18) is None
    assert HandleIndex(None).read(17) is None  # an executor made without a journal folder


def test_the_log_tail_keeps_the_last_lines_and_names_the_payloads_last_words(tmp_path: Path) -> None:
    log = tmp_path / "payload.log"
    log.write_text("".join(f"line {i}\n" for i in range(100))
                   + "[1]<stderr>:gridml payload error: bad data in f.h5\n[1]<stderr>:  \n")
    assert tail(log, 3).splitlines() == ["line 99", "[1]<stderr>:gridml payload error: bad data "
                                         "in f.h5", "[1]<stderr>:  "]
    assert last_error_line(tail(log)) == "gridml payload error: bad data in f.h5"
    assert tail(tmp_path / "none.log") == ""


def test_waiting_for_health_stops_as_soon_as_the_server_is_gone() -> None:
    start = time.monotonic()
    assert wait_healthy("http://127.0.0.1:9", alive=lambda: False, timeout=30) is False
    assert time.monotonic() - start < 5


@pytest.mark.parametrize("path", ["gridml.executors.local:LocalExecutor",
                                  "gridml.executors.dryrun:DryRunExecutor",
                                  "gridml.executors.panda.executor:PandaExecutor",
                                  "gridml.executors.slurm.executor:SlurmExecutor"])
def test_every_executor_declares_what_the_controller_reads_of_it(path: str) -> None:
    import importlib

    module, name = path.split(":")
    cls = getattr(importlib.import_module(module), name)
    assert isinstance(cls.remote, bool) and isinstance(cls.watch_heartbeats, bool)


def test_the_phpo_study_driver_is_no_executor() -> None:
    from gridml import executors
    from gridml.errors import UsageError
    from gridml.phpo.driver import PhpoDriver

    assert PhpoDriver.remote is True and not hasattr(PhpoDriver, "submit")
    with pytest.raises(UsageError, match="study driver"):
        executors.create("phpo")


def test_every_state_file_is_named_by_the_layout(tmp_path: Path) -> None:
    runs = RunsLayout(tmp_path)
    study = runs.study("s")
    assert runs.journal("panda") == tmp_path / ".journal" / "panda"
    assert study.api_record == tmp_path / "s" / "api.json"
    assert study.trial(7) == tmp_path / "s" / "trial-0007"
    assert study.interrupted(7).parent == study.trial(7)
    assert study.phpo_evaluations.parent == study.phpo
    assert runs.scaling("s") == tmp_path / "s-scale"
