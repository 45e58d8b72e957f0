"""The PanDA executor on the wire: the real panda-client against the local PanDA double.

Submission, duplicate recognition after a controller crash, kill, retry, a refused task, a server
that is down, missing credentials. Tasks are held in ``ready`` (a queue with no free slot) unless
a test needs a job to run, so no training runs here (the e2e test runs whole trials).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gridml.errors import ExecutorError
from gridml.executors.panda.executor import journal
from gridml.settings import settings
from gridml.executors.panda.executor import render_for_request, task_id_of
from tests.helpers import wait_for
from tests.panda_double import PandaDouble
from tests.panda_double.campaign import make_campaign, panda_executor, panda_spec, register_sample_data

pytestmark = [pytest.mark.service]


@pytest.fixture
def panda(tmp_path: Path, gridml_home: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[PandaDouble]:
    with PandaDouble(tmp_path / "panda") as double:
        for key, value in double.client_env().items():
            monkeypatch.setenv(key, value)
        double.jedi.hold = True
        yield double


@pytest.fixture
def spec(tmp_path: Path, gridml_home: Path) -> Path:
    train, val = register_sample_data(tmp_path, n_train=400, n_val=100)
    return panda_spec(tmp_path, "wire", train, val)


def submitted(campaign: Any) -> list[Any]:
    return [t for t in campaign.store.list_trials(campaign.study.id) if t.external_id]


def request_for(campaign: Any, trial: Any) -> Any:
    return campaign.request_for(trial)


def test_each_trial_becomes_one_task_with_the_rendered_parameters(panda: PandaDouble, spec: Path) -> None:
    campaign = make_campaign(spec)
    campaign.step()
    trials = submitted(campaign)
    assert len(trials) == 2 and len(panda.jedi.tasks) == 2
    for trial in trials:
        task = panda.jedi.get(task_id_of(trial.external_id))
        expected = render_for_request(request_for(campaign, trial))
        assert task.params["taskName"] == f"user.jtester.wire.trial-{trial.number:04d}/"
        assert {k: v for k, v in task.params.items() if k not in ("userName", "taskType")} == expected
        assert task.user == "Jane Tester"  # from the OIDC token panda-client sent
    assert panda.api.calls.count("POST task/submit") == 2
    panda.jedi.wait(task_id_of(trials[0].external_id), ("ready",))  # registered -> defined -> ready
    status = campaign.executor.poll(trials[0].external_id)
    assert status.state == "submitted" and "ready" in status.message


def test_a_resubmission_after_a_controller_crash_finds_the_same_task(panda: PandaDouble, spec: Path) -> None:
    # new tasks stay in DEFT's table until the test lets them through (a fixed delay raced a loaded CI host)
    panda.jedi.register_delay_s = 3600.0
    campaign = make_campaign(spec)
    campaign.step()
    trial = submitted(campaign)[0]
    status = campaign.executor.poll(trial.external_id)  # getTaskStatus: "Task not found" for now
    assert status.state == "submitted" and "not registered by JEDI yet" in status.message
    # the controller dies now; its successor resubmits while the task is only in DEFT: code 1
    (campaign.runs_dir / "wire" / f"trial-{trial.number:04d}" / "panda.json").rename(
        campaign.runs_dir / "panda.json.saved")
    assert panda_executor().submit(request_for(campaign, trial)) == trial.external_id
    (campaign.runs_dir / "panda.json.saved").rename(
        campaign.runs_dir / "wire" / f"trial-{trial.number:04d}" / "panda.json")
    panda.jedi.register_delay_s = 0.0
    panda.jedi.register_pending()
    panda.jedi.wait(task_id_of(trial.external_id), ("ready",))
    inserts = panda.jedi.inserts
    # a new controller process: the journal in the trial's folder names the task, nothing is sent
    assert panda_executor().submit(request_for(campaign, trial)) == trial.external_id
    assert panda.jedi.inserts == inserts
    # journal lost as well: the server answers "duplicate" (code 2), and that task is followed
    (campaign.runs_dir / "wire" / f"trial-{trial.number:04d}" / "panda.json").unlink()
    assert panda_executor().submit(request_for(campaign, trial)) == trial.external_id
    assert panda.jedi.inserts == inserts + 1 and len(panda.jedi.tasks) == 2
    # the controller died between recording "submitted" and the executor's answer
    campaign.store.update_trial(trial.id, external_id=None)
    restarted = make_campaign(spec)
    restarted.step()
    assert restarted.store.get_trial(trial.id).external_id == trial.external_id
    assert len(panda.jedi.tasks) == 2


def test_kill_and_retry(panda: PandaDouble, spec: Path) -> None:
    campaign = make_campaign(spec)
    campaign.step()
    first, second = submitted(campaign)
    executor = campaign.executor
    executor.kill(first.external_id)
    assert panda.jedi.wait(task_id_of(first.external_id), ("aborted",)) == "aborted"
    assert executor.poll(first.external_id).state == "killed"
    executor.kill(first.external_id)  # already over: nothing to do, no error
    with pytest.raises(ExecutorError, match="only finished or failed tasks can be retried"):
        executor.retry(second.external_id)  # still queued
    panda.down()
    executor.kill(second.external_id)  # logged, not raised: stopping a campaign goes on
    panda.up()
    later = campaign.store.update_trial(second.id, attempts=second.attempts + 1)
    assert executor.submit(request_for(campaign, later)) == second.external_id  # still active: followed
    panda.jedi.fail_next, panda.jedi.hold = 1, False  # its worker node will be lost
    second_id = task_id_of(second.external_id)
    assert panda.jedi.wait(second_id, ("failed",)) == "failed"
    status = executor.poll(second.external_id)
    assert status.state == "failed" and f"PanDA task {second_id} is failed" in status.message
    panda.jedi.hold = True
    assert executor.retry(second.external_id) == second.external_id
    assert panda.jedi.wait(second_id, ("ready",)) == "ready"
    assert panda.jedi.get(second_id).history[-2:] == ["failed", "ready"]
    assert executor.poll(second.external_id).state == "submitted"


def test_a_later_attempt_of_a_failed_trial_is_a_retry_of_its_task(panda: PandaDouble, spec: Path) -> None:
    campaign = make_campaign(spec)
    campaign.step()
    trial = submitted(campaign)[0]
    task_id = task_id_of(trial.external_id)
    panda.jedi.fail_next, panda.jedi.hold = 2, False
    panda.jedi.wait(task_id, ("failed",))
    panda.jedi.hold, panda.jedi.command_delay_s = True, 1.5  # JEDI acts on commands later
    again = campaign.store.update_trial(trial.id, attempts=trial.attempts + 1)
    assert campaign.executor.submit(request_for(campaign, again)) == trial.external_id
    waiting = panda_executor().poll(trial.external_id)  # still "failed" at PanDA: not the new attempt's end
    assert waiting.state == "submitted" and "retry registered" in waiting.message
    assert panda.jedi.wait(task_id, ("ready",)) == "ready" and len(panda.jedi.tasks) == 2
    assert campaign.executor.poll(trial.external_id).state == "submitted"
    journal = json.loads((campaign.runs_dir / "wire" / f"trial-{trial.number:04d}" / "panda.json").read_text())
    assert journal["attempt"] == 2 and journal["jediTaskID"] == task_id
    assert "retry_pending" not in journal  # cleared once the task left "failed"


def test_a_refused_task_is_a_clear_error(panda: PandaDouble, spec: Path) -> None:
    panda.jedi.max_active_tasks = 1
    campaign = make_campaign(spec)
    with pytest.raises(ExecutorError, match=r"PanDA refused task user\.jtester\.wire\.trial-0001/ "
                                            r"\(code 10\): Too many active tasks"):
        campaign.step()


def test_a_server_that_is_down_is_a_clear_error(panda: PandaDouble, spec: Path) -> None:
    panda.down()
    with pytest.raises(ExecutorError, match=r"PanDA server http://127\.0\.0\.1:\d+/server/panda is "
                                            r"not reachable .*Connection refused"):
        make_campaign(spec).step()
    panda.up()
    campaign = make_campaign(spec)  # `gridml resume`: the trial recorded as submitted goes out now
    campaign.step()
    handle = submitted(campaign)[0].external_id
    assert len(submitted(campaign)) == 2 and len(panda.jedi.tasks) == 2
    panda.down()
    status = campaign.executor.poll(handle)  # following goes on waiting, the task is not lost
    assert status.state == "unknown" and "not reachable" in status.message
    panda.up()
    assert campaign.executor.poll(handle).state == "submitted"


def test_missing_credentials_are_named(panda: PandaDouble, spec: Path, tmp_path: Path,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OIDC_AUTH_TOKEN_FILE")
    with pytest.raises(ExecutorError, match="PANDA_AUTH=oidc but no token was found"):
        make_campaign(spec).step()
    monkeypatch.delenv("PANDA_AUTH")
    with pytest.raises(ExecutorError, match="no grid nickname: panda.nickname is not set"):
        make_campaign(spec).step()
    named = spec.parent / "named.yaml"
    named.write_text(spec.read_text().replace("name: wire", "name: named") + "panda: {nickname: jtester}\n")
    with pytest.raises(ExecutorError, match=r"refused the upload of the sandbox jobO\.gridml-"
                                            r"[0-9a-f]{16}\.tar\.gz .*check your PanDA credentials"):
        make_campaign(named).step()  # no token sent: the server says 403 (to the upload, first)


def test_a_task_that_cannot_be_defined_is_broken_and_the_trial_fails(panda: PandaDouble, spec: Path) -> None:
    from gridml.executors.panda.executor import client as panda_client

    campaign = make_campaign(spec)
    campaign.step()
    params = render_for_request(request_for(campaign, submitted(campaign)[0]))
    params["taskName"] = params["taskName"].rstrip("/") + ".nodata/"
    params["jobParameters"] = [dict(p, dataset="user.test:no.such.dataset") if p.get("value") == '-i "${IN/T}"'
                               else p for p in params["jobParameters"]]
    task_id, _ = panda_client.submit(params)
    journal.write_task(settings().runs_dir / ".journal" / "panda", task_id, params,
                       campaign.request_for(submitted(campaign)[0]).trial.output_dir)
    assert panda.jedi.wait(task_id, ("broken",)) == "broken"
    status = panda_executor().poll(f"panda:{task_id}")  # a fresh controller: its journal
    assert status.state == "failed" and f"PanDA task {task_id} is broken" in status.message
    assert "GET task/get_task_parameters" not in panda.api.calls  # the journal has them


def test_killing_a_running_task_stops_its_job(panda: PandaDouble, spec: Path) -> None:
    from gridml.executors.panda.executor import client as panda_client

    params = {"taskName": "user.jtester.sleeper/", "uniqueTaskName": True, "vo": "atlas",
              "prodSourceLabel": "user", "jobParameters": [
                  {"type": "constant", "value": '-p "', "padding": False},
                  {"type": "constant", "value": "sleep%20120", "padding": False},
                  {"type": "constant", "value": '"'}]}
    panda.jedi.hold = False
    task_id, _ = panda_client.submit(params)
    panda.jedi.wait(task_id, ("running",))
    job = panda.jedi.get(task_id).jobs[0]
    wait_for(lambda: job.proc is not None, 30, "the pilot to start the task's job")
    panda_executor().kill(f"panda:{task_id}")
    assert panda.jedi.wait(task_id, ("aborted",), timeout_s=30) == "aborted"
    assert job.proc.wait(timeout=10) != 0 and job.status == "cancelled"


def test_a_finished_task_gives_its_outputs_back_to_a_restarted_controller(
        panda: PandaDouble, spec: Path, tmp_path: Path) -> None:
    """A cheap job stands in for the payload (it writes what the payload writes); the task ends
    ``finished``; a fresh executor finds the trial's folder in its journal, fetches
    metrics.jsonl and result.json there and reports every stored file."""
    from gridml.executors.panda.executor import client as panda_client
    from gridml.executors.panda.render import PandaTask, pack, render_task_params

    doc = {"study": "wire", "output_dir": str(tmp_path / "trial-0007" / "outputs")}
    writes = ("printf '{\"epoch\": 1}\\n' > metrics.jsonl; echo '{\"state\": \"completed\"}' > result.json; "
              "echo model > model.keras; echo png > curves.png; echo '{}' > provenance.json; "
              "echo src > model_source.py; "
              f"true --trial {pack(json.dumps(doc).encode())}")
    task = PandaTask(nickname="jtester", study="wire", trial_number=7, train=["user.test:toy.train"],
                     validation=["user.test:toy.val"], n_train=2, n_validation=2, command=writes)
    panda.jedi.hold, panda.jedi.finish_next = False, 1
    params = render_task_params(task)
    task_id, _ = panda_client.submit(params)
    journal.write_task(settings().runs_dir / ".journal" / "panda", task_id, params,
                       tmp_path / "trial-0007" / "outputs")
    assert panda.jedi.wait(task_id, ("finished",), timeout_s=60) == "finished"
    status = panda_executor().poll(f"panda:{task_id}")
    assert status.state == "completed", status
    names = sorted(o["name"] for o in status.stored_outputs or [])
    assert names == sorted(f"user.jtester.{task_id}._000001.{f}" for f in
                           ("model.keras", "curves.png", "metrics.jsonl", "provenance.json", "result.json",
                            "model_source.py"))
    outputs = tmp_path / "trial-0007" / "outputs"
    assert (outputs / "metrics.jsonl").read_text() == '{"epoch": 1}\n'
    assert json.loads((outputs / "result.json").read_text()) == {"state": "completed"}


def test_an_x509_proxy_over_https_is_how_panda_client_authenticates(
        tmp_path: Path, gridml_home: Path, spec: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    named = spec.parent / "x509.yaml"
    named.write_text(spec.read_text().replace("name: wire", "name: x509") + "panda: {nickname: jtester}\n")
    with PandaDouble(tmp_path / "tls-panda", https=True) as double:
        for key in ("PANDA_AUTH", "PANDA_AUTH_VO", "OIDC_AUTH_TOKEN_FILE"):
            monkeypatch.delenv(key, raising=False)
        for key, value in double.client_env().items():
            monkeypatch.setenv(key, value)
        double.jedi.hold = True
        campaign = make_campaign(named)
        campaign.step()
        tasks = list(double.jedi.tasks.values())
        assert len(tasks) == 2 and {t.user for t in tasks} == {"Jane Tester"}  # the proxy's CN
        assert double.url.startswith("https://")
        monkeypatch.setenv("X509_USER_PROXY", str(tmp_path / "no-such-proxy"))  # expired, removed
        with pytest.raises(ExecutorError, match="no X509 proxy at .*no-such-proxy"):
            panda_executor().submit(request_for(campaign, submitted(campaign)[0]))
        status = campaign.executor.poll(submitted(campaign)[0].external_id)
        assert status.state == "unknown" and "no X509 proxy" in status.message  # waits for a new one


def test_a_task_panda_still_queues_shows_as_submitted_not_running(panda: PandaDouble, spec: Path) -> None:
    """`gridml status` says what PanDA says: a task still registered/ready is "submitted"."""
    campaign = make_campaign(spec)
    campaign.step()
    campaign.step()  # the first poll: the tasks wait in "ready" (held)
    trials = submitted(campaign)
    assert len(trials) == 2 and {t.state for t in trials} == {"submitted"}
    panda.jedi.hold = False

    def running() -> bool:
        campaign.step()
        return {t.state for t in submitted(campaign)} == {"running"}

    wait_for(running, 60, lambda: f"both trials running: {[t.state for t in submitted(campaign)]}",
             interval=0.2)
    for trial in submitted(campaign):
        panda_executor().kill(trial.external_id)
