"""The live channel on the real Slurm cluster (the nodes are network namespaces sharing only the
folders with the controller; the embedded server on loopback, so the ranks have no API): a
running job's epochs are in `gridml status` before the job ends, with its progress.json, and
`gridml stop` then ends it cleanly after its epoch (its model saved, the job not cancelled); the
median and ASHA rules prune a trial that never learns after epoch 1, as over HTTP and as on the
local executor (tests/integration/test_live_channel.py), through decision.json; a job hung in
``forward`` is caught by its progress, its stacks dumped, cancelled, retried once."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

from gridml.errors import GridmlError
from gridml.store import open_store
from tests.helpers import (gridml, gridml_json, make_registered_sample_data, report_gaps, start_gridml,
                           write_spec)
from tests.slurm.slurm_fixtures import SlurmCluster
from tests.slurm.test_slurm_campaign import search, trial_logs

pytest.importorskip("torch")
pytestmark = [pytest.mark.service, pytest.mark.slow]

SLOW_MODEL = '''
import time
from torch import nn


class Slow(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.lin = nn.Linear(n, 1)

    def forward(self, x):
        if self.training:
            time.sleep(0.25)  # epochs of a few seconds: seen while the job runs
        return self.lin(x)


def build_model(hparams, input_shape):
    return Slow(int(input_shape[0]))
'''


def test_epochs_are_seen_while_the_slurm_job_runs_and_gridml_stop_ends_it(
        tmp_path: Path, gridml_home: Path, slurm_env: SlurmCluster) -> None:
    """With the nodes' way home cut (they reach slurmctld only, as at a site whose compute nodes
    cannot reach the login node): every epoch still arrives, live, through the spool, and no
    report waits on the network."""
    with slurm_env.no_way_home() as home:
        probe = slurm_env.node_run("n1", sys.executable, "-c", (
            "import socket, sys\ntry:\n    socket.create_connection((sys.argv[1], 9), 5)\n"
            "except OSError as e:\n    print(e.strerror)"), home)
        assert probe.stdout.strip() == "No route to host", (probe.stdout, probe.stderr)
        _live_epochs_and_stop(tmp_path, gridml_home, slurm_env)


def _live_epochs_and_stop(tmp_path: Path, gridml_home: Path, slurm_env: SlurmCluster) -> None:
    data = make_registered_sample_data(tmp_path, n_train=600, n_val=200, files=1)
    (tmp_path / "slow.py").write_text(SLOW_MODEL)
    spec = write_spec(
        tmp_path / "spec.yaml", "slurm-live", *data,
        payload=f"payload: {{framework: torch, model: {tmp_path / 'slow.py'}}}\n",
        search=search(1, 1),
        training="training: {epochs: 12, batch_size: 64, workers: 1, metrics: [accuracy]}\n",
        resources="resources: {nodes: 1, cores: 1, memory_gb: 1, walltime: 20m}\n",
        backend="backend: {executor: slurm, data: local, server: embedded, retries: 0}\n",
        slurm=f"slurm: {{partition: {slurm_env.partition}}}\n")
    proc = start_gridml("submit", str(spec), "--quiet")
    seen: list[tuple[str, int]] = []
    stopped = False
    store = open_store()  # what `gridml status` reads (a CLI run per look is too slow a probe)
    try:
        end = time.monotonic() + 600
        while proc.poll() is None and time.monotonic() < end:
            try:
                trials = store.list_trials(store.get_study("slurm-live").id)
            except GridmlError:  # the study is not created yet
                trials = []
            seen += [(t.state, t.epochs_done) for t in trials]
            if not stopped and any(s == "running" and 0 < n < 12 for s, n in seen):
                # epochs seen while the job runs: now stop it (graceful: through decision.json)
                assert "asked to stop" in gridml("stop", "slurm-live").stdout
                stopped = True
            time.sleep(0.3)
        out, err = proc.communicate(timeout=60)
    finally:
        store.close()
        if proc.poll() is None:
            proc.kill()
    # before the live channel, a Slurm job's epochs all arrived when it ended
    assert any(state == "running" and 0 < n < 12 for state, n in seen), seen
    doc = gridml_json("status", "slurm-live")
    (trial,) = doc["trials"]
    assert doc["study"]["state"] == "stopped" and trial["state"] == "stopped", \
        (trial, err[-3000:], trial_logs("slurm-live", 0)[-3000:])
    assert 1 <= trial["epochs_done"] < 12 and trial["error"].startswith("stopped (gridml stop)")
    # it ended cleanly after its epoch: model saved, the job completed (not cancelled)
    assert any(o["name"].endswith("model.pt") for o in trial["outputs"]), trial
    jobs = [state for _, name, state in slurm_env.sacct() if "slurm-live" in name]
    assert jobs and all(state == "COMPLETED" for state in jobs), jobs
    progress = json.loads((gridml_home / "runs" / "slurm-live" / "trial-0000" /
                           "progress.json").read_text())
    assert progress["epoch"] == trial["epochs_done"] and progress["epoch_done"], progress
    # nothing lost: every epoch the rank spooled is stored, once; no report waited on a post
    # (one that cannot arrive costs 31 s of retries) or a should-stop question
    spooled = [json.loads(line)["epoch"] for line in (gridml_home / "runs" / "slurm-live" /
               "trial-0000" / "outputs" / "metrics.jsonl").read_text().splitlines() if line.strip()]
    stored = [e["epoch"] for e in gridml_json("status", "slurm-live", "--trial", "0")["epochs"]]
    assert stored == spooled == list(range(1, trial["epochs_done"] + 1)), (stored, spooled)
    log = trial_logs("slurm-live", 0)
    assert "not posted" not in log and "Connection refused" not in log, log[-3000:]
    gaps = report_gaps(log)
    assert max(gaps, default=0.0) < 10, (gaps, log[-3000:])  # (stopped after epoch 2 or later)
    print(f"\n[slurm] no way home: s per epoch report beyond training: {[round(g, 1) for g in gaps]}")


MODES_MODEL = '''
from torch import nn


class Model(nn.Module):
    def __init__(self, n, mode):
        super().__init__()
        self.lin = nn.Linear(n, 1)
        self.mode = mode

    def forward(self, x):
        if self.mode == "never":
            return self.lin(x) * 0.0 + 20.0  # always "signal": it never learns
        return self.lin(x)


def build_model(hparams, input_shape):
    return Model(int(input_shape[0]), hparams["mode"])
'''


@pytest.mark.parametrize(("rule", "why"), [
    pytest.param("{rule: median, min_epochs: 1, min_trials: 1}", "worse than median", id="median"),
    pytest.param("{rule: asha, min_epochs: 1, reduction: 2}", "outside the top 1 kept", id="asha")])
def test_the_rule_prunes_a_slurm_trial_through_its_folder(
        tmp_path: Path, gridml_home: Path, slurm_env: SlurmCluster, rule: str, why: str) -> None:
    data = make_registered_sample_data(tmp_path, n_train=600, n_val=200, files=1)
    (tmp_path / "modes.py").write_text(MODES_MODEL)
    spec = write_spec(
        tmp_path / "spec.yaml", "slurm-prune", *data,
        payload=f"payload: {{framework: torch, model: {tmp_path / 'modes.py'}}}\n",
        search=("search:\n  algorithm: grid\n  objective: val_loss\n  max_trials: 2\n"
                f"  parallel: 1\n  early_stopping: {rule}\n"
                "  space:\n    mode: {type: categorical, choices: [learn, never]}\n"),
        training="training: {epochs: 2, batch_size: 64, workers: 1, metrics: [accuracy]}\n",
        resources="resources: {nodes: 1, cores: 1, memory_gb: 1, walltime: 20m}\n",
        backend="backend: {executor: slurm, data: local, server: embedded, retries: 0}\n",
        slurm=f"slurm: {{partition: {slurm_env.partition}}}\n")
    proc = start_gridml("submit", str(spec), "--quiet")
    out, err = proc.communicate(timeout=900)
    trials = gridml_json("status", "slurm-prune")["trials"]  # 2 epochs: pruned after 1 shows
    by_mode = {t["hparams"]["mode"]: t for t in trials}
    assert by_mode["learn"]["state"] == "completed", err[-3000:]
    # the node had no API: the decision came through decision.json, after epoch 1 as over HTTP
    never = by_mode["never"]
    assert never["state"] == "pruned" and never["epochs_done"] == 1, (never, err[-3000:])
    trial_dir = gridml_home / "runs" / "slurm-prune" / f"trial-{never['number']:04d}"
    assert json.loads((trial_dir / "decision.json").read_text())["stop"] is True
    result = json.loads((trial_dir / "outputs" / "result.json").read_text())
    assert result["state"] == "pruned" and why in result["reason"], result


HANG_MODEL = '''
import time
from torch import nn


class Hang(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.lin = nn.Linear(n, 1)
        self.calls = 0

    def forward(self, x):
        if self.training:
            self.calls += 1
            if self.calls > 11:  # 10 batches an epoch: hangs in epoch 2
                time.sleep(3600)
        return self.lin(x)


def build_model(hparams, input_shape):
    return Hang(int(input_shape[0]))
'''


def test_a_slurm_trial_hung_in_forward_is_dumped_cancelled_and_failed_stalled(
        tmp_path: Path, gridml_home: Path, slurm_env: SlurmCluster) -> None:
    data = make_registered_sample_data(tmp_path, n_train=600, n_val=200, files=1)
    (tmp_path / "hang.py").write_text(HANG_MODEL)
    spec = write_spec(
        tmp_path / "spec.yaml", "slurm-stall", *data,
        payload=f"payload: {{framework: torch, model: {tmp_path / 'hang.py'}}}\n",
        search=search(1, 1),
        training="training: {epochs: 3, batch_size: 64, workers: 1, metrics: [accuracy]}\n",
        resources="resources: {nodes: 1, cores: 1, memory_gb: 1, walltime: 20m}\n",
        backend=("backend: {executor: slurm, data: local, server: embedded, retries: 0, "
                 "stall_timeout: 5s}\n"),
        slurm=f"slurm: {{partition: {slurm_env.partition}}}\n")
    proc = start_gridml("submit", str(spec), "--quiet")
    out, err = proc.communicate(timeout=900)
    (trial,) = gridml_json("status", "slurm-stall")["trials"]
    assert trial["state"] == "failed" and trial["attempts"] == 2, (trial, err[-3000:])
    assert trial["error"].startswith("stalled: no batch for "), trial["error"]
    progress = json.loads((gridml_home / "runs" / "slurm-stall" / "trial-0000" /
                           "progress.json").read_text())
    assert progress["attempt"] == 2, progress  # the batch script told the payload its attempt
    log = trial_logs("slurm-stall", 0)
    assert "most recent call first" in log and "in forward" in log, log[-3000:]
