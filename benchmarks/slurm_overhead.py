"""Controller overhead per trial on Slurm: a campaign of tiny jobs on the two-node test cluster.

    python benchmarks/slurm_overhead.py [--trials 200] [--parallel 16] [--cluster DIR]
                                        [--pack K | --array] [--compare] [--cpus N]
                                        [--max-wall S]

Each trial's payload is replaced (``SlurmExecutor(payload_override=...)``, an option only this
benchmark uses) by a trivial job that writes one epoch into the trial's metrics spool and exits,
so what is measured is gridml + Slurm: plan, write trial file and batch script, ``sbatch``, the
batched ``squeue`` polls, spool ingest, output upload and the searcher (random). Reported:
wall time per trial, and the controller's own time per trial split into submit / poll / finalize
(time spent inside those calls, i.e. not counting the sleeps between cycles). Starts its own
cluster unless --cluster names a running one (scripts/slurm-cluster.sh).

``--pack K``: the trials run as job steps of packed allocations of K slots (``slurm.pack``);
``--array``: each cycle's trials as one job array (``slurm.array``); ``--compare``: one job per
trial, then packed (K = --pack, default 16), in the same run. Also reported: ``sbatch`` calls
per trial (every sbatch gridml runs is counted), and for packed trials the step round trip (srun
started on the submit host -> the step's exit code file written, a trivial payload) and how long
trials waited in the queue for a slot. For every mode: the start latency, from the executor's
submit (sbatch, or the packer's queue) to the payload running (a timestamp the payload writes).

The issue's campaign (200 trials, packed K = 16 vs one job per trial) needs 16 slots on a node:
``--cpus 16`` declares the test cluster's two nodes with 16 CPUs each (``CPUs=16`` and
``SlurmdParameters=config_overrides`` in the cluster's slurm.conf, the daemons restarted once;
only for a cluster this benchmark starts). ``--max-wall S``: each mode stops after S seconds and
reports the trials it finished (a loaded machine: say so with the figures).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

EPOCH = {"epoch": 1, "metrics": {"loss": 0.5, "val_loss": 0.5}, "epoch_time": 0.01}
TRIVIAL = ["bash", "-c", "date +%s.%N > payload_started && mkdir -p ../outputs && "
           f"echo '{json.dumps(EPOCH)}' > ../outputs/metrics.jsonl"]


class Timed:
    """Wraps an executor and sums the time spent in each call."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.spent: defaultdict[str, float] = defaultdict(float)
        self.calls: defaultdict[str, int] = defaultdict(int)
        self.name, self.remote = inner.name, inner.remote
        self.watch_heartbeats = getattr(inner, "watch_heartbeats", False)

    def __getattr__(self, item: str) -> Any:
        fn = getattr(self.inner, item)

        def timed(*a: Any, **kw: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return fn(*a, **kw)
            finally:
                self.spent[item] += time.perf_counter() - t0
                self.calls[item] += 1
        return timed


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=200)
    ap.add_argument("--parallel", type=int, default=16)
    ap.add_argument("--cluster", type=Path, default=None)
    ap.add_argument("--pack", type=int, default=0, help="K slots per packed allocation")
    ap.add_argument("--array", action="store_true", help="each cycle's trials as one job array")
    ap.add_argument("--compare", action="store_true", help="one job per trial, then --pack K (16)")
    ap.add_argument("--cpus", type=int, default=0,
                    help="declare the started cluster's nodes with N CPUs (K = 16 needs 16)")
    ap.add_argument("--max-wall", type=float, default=0.0,
                    help="stop each mode after this many seconds (0: run every trial)")
    args = ap.parse_args()

    cluster = args.cluster or Path(tempfile.mkdtemp(prefix="gridml-slurm-bench-"))
    started = args.cluster is None
    if started:
        _cluster("start", cluster)
        if args.cpus:
            _declare_cpus(cluster, args.cpus)
    elif args.cpus:
        ap.error("--cpus only for a cluster this benchmark starts (not with --cluster)")
    os.environ["SLURM_CONF"] = str(cluster / "etc" / "slurm.conf")
    home = Path(tempfile.mkdtemp(prefix="gridml-bench-home-"))
    os.environ["GRIDML_HOME"] = str(home)
    try:
        if args.compare:
            results = [run(argparse.Namespace(**{**vars(args), "pack": 0, "array": False}), home, "jobs"),
                       run(argparse.Namespace(**{**vars(args), "pack": args.pack or 16}), home, "packed")]
            print(json.dumps(results, indent=2))
        else:
            print(json.dumps(run(args, home, "bench"), indent=2))
    finally:
        if started:
            _cluster("stop", cluster, check=False)
            shutil.rmtree(cluster, ignore_errors=True)
        shutil.rmtree(home, ignore_errors=True)


def _cluster(cmd: str, folder: Path, *args: str, check: bool = True) -> None:
    proc = subprocess.run(["bash", str(ROOT / "scripts/slurm-cluster.sh"), cmd, str(folder), *args],
                          capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise SystemExit(f"slurm-cluster.sh {cmd} {' '.join(args)}: {proc.stderr[-2000:]}")


def _declare_cpus(folder: Path, cpus: int) -> None:
    """The nodes declared with ``cpus`` CPUs whatever the machine has (slurmd believes the
    configuration: ``SlurmdParameters=config_overrides``); slurmctld and the two slurmd restarted
    to read it (not the whole cluster: a second ``slurm-cluster.sh start`` of one folder fails at
    ``sacctmgr add cluster``, its name being cut in ``sacctmgr list``)."""
    import re

    conf = folder / "etc" / "slurm.conf"
    env = {**os.environ, "SLURM_CONF": str(conf)}
    nodes = ("n1", "n2")
    for node in nodes:
        _cluster("node-stop", folder, node)
    pid_file = folder / "run" / "slurmctld.pid"
    pid = int(pid_file.read_text())
    os.kill(pid, 15)
    for _ in range(100):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    text = re.sub(r"(?m)^(NodeName=.*\bCPUs=)\d+", rf"\g<1>{cpus}", conf.read_text())
    if "SlurmdParameters=" not in text:
        text = text.replace("\nNodeName=", "\nSlurmdParameters=config_overrides\nNodeName=", 1)
    conf.write_text(text)
    subprocess.run(["slurmctld", "-f", str(conf)], env=env, check=True)
    for node in nodes:
        _cluster("node-start", folder, node)
    subprocess.run(["scontrol", "update", f"nodename={','.join(nodes)}", "state=resume"], env=env,
                   capture_output=True)
    for _ in range(120):
        out = subprocess.run(["sinfo", "-h", "-N", "-t", "idle", "-o", "%N %c"], env=env,
                             capture_output=True, text=True).stdout.split("\n")
        if sum(line.endswith(f" {cpus}") for line in out) >= len(nodes):
            return
        time.sleep(0.5)
    raise SystemExit(f"the nodes did not come back with {cpus} CPUs: {out}")


def run(args: argparse.Namespace, home: Path, name: str) -> dict[str, Any]:
    from gridml import controller as ctl
    from gridml.executors.slurm import cli
    from gridml.data import open_data_manager
    from gridml.executors.slurm.executor import SlurmExecutor
    from gridml.settings import settings
    from gridml.spec import load_spec
    from gridml.store.sql import open_sql_store
    from tests.helpers import register_tiny_datasets, write_spec

    data = open_data_manager("local")
    (home / name).mkdir(parents=True, exist_ok=True)
    train, val = register_tiny_datasets(data, home / name, f"user.{name}")
    spec = write_spec(
        home / f"{name}.yaml", name, train, val,
        training="training: {epochs: 1, batch_size: 8, workers: 1}\n",
        resources="resources: {cores: 1, memory_gb: 0.1, walltime: 5m}\n",
        backend="backend: {executor: slurm, data: local, server: embedded, retries: 0}\n",
        search=f"search:\n  algorithm: random\n  max_trials: {args.trials}\n  parallel: {args.parallel}\n"
               "  space:\n    learning_rate: {type: real, low: 1.0e-4, high: 1.0e-1, log: true}\n",
        slurm="slurm: {partition: gridml" + (f", pack: {args.pack}" if args.pack else "")
              + (", array: true" if args.array else "") + "}\n")
    loaded = load_spec(spec, did_exists=data.exists)
    store = open_sql_store(settings().db_url)
    executor = Timed(SlurmExecutor(journal=settings().runs_dir / ".journal" / "slurm",
                                   payload_override=TRIVIAL))
    campaign = ctl.Campaign(loaded, store, executor, data, settings().runs_dir, api_url=None, poll_s=0.5)
    sbatch = {"calls": 0}
    real_submit = cli.submit  # every sbatch (arrays too) goes through it

    def counted(fn: Any) -> Any:
        def call(*a: Any, **kw: Any) -> Any:
            sbatch["calls"] += 1
            return fn(*a, **kw)
        return call

    cli.submit = counted(real_submit)  # type: ignore[method-assign]
    step_s = 0.0
    t0 = time.perf_counter()
    cut = False
    while True:
        s0 = time.perf_counter()
        over = campaign.step()
        step_s += time.perf_counter() - s0
        if over:
            break
        if args.max_wall and time.perf_counter() - t0 > args.max_wall:
            cut = True  # what fits: the trials finished so far are reported
            campaign.interrupt()
            break
        time.sleep(campaign.poll_s)
    wall = time.perf_counter() - t0
    executor.close()
    cli.submit = real_submit  # type: ignore[method-assign]
    trials = store.list_trials(campaign.study.id)
    done = sum(t.state == "completed" for t in trials)
    n = done if cut else len(trials)  # per trial: per finished trial when cut short
    starts = []
    for t in trials:  # the executor's submit (sbatch, the packer's queue) -> the payload running
        folder = settings().runs_dir / name / f"trial-{t.number:04d}"
        entry = _journal(folder).get("attempts", {}).get("1", {})
        try:
            began = float((folder / "attempt-1" / "payload_started").read_text())
            starts.append(began - float(entry.get("queued_at") or entry["submitting"]))
        except (OSError, KeyError, TypeError, ValueError):
            continue
    doc = {"trials": len(trials), "completed": done, "cut_at_max_wall": cut,
           "parallel": args.parallel, "wall_s": round(wall, 1),
           "wall_per_trial_s": round(wall / n, 3),
           "controller_s_per_trial": round(step_s / n, 4),
           "executor_s_per_trial": {k: round(v / n, 4) for k, v in executor.spent.items()},
           "executor_calls": dict(executor.calls),
           "finalize_etc_s_per_trial": round((step_s - sum(executor.spent.values())) / n, 4),
           "mode": "packed" if args.pack else "array" if args.array else "one job per trial",
           "pack": args.pack or None, "sbatch_calls": sbatch["calls"],
           "sbatch_per_trial": round(sbatch["calls"] / n, 4),
           "controller_ms_per_trial": round(1000 * step_s / n, 1),
           "submit_to_payload_running_s": _quantiles(starts)}
    if args.pack:
        packer = executor.inner.packer
        trips, waits = [], packer.start_latency_s
        for t in trials:
            run_dir = settings().runs_dir / name / f"trial-{t.number:04d}" / "attempt-1"
            entry = _journal(run_dir.parent).get("attempts", {}).get("1", {})
            try:
                trips.append((run_dir / "exit_code").stat().st_mtime - float(entry["started_at"]))
            except (OSError, KeyError, TypeError, ValueError):
                continue
        doc.update(srun_calls=packer.srun_calls, allocations=packer.sbatch_calls,
                   step_round_trip_s=_quantiles(trips), queue_wait_s=_quantiles(waits))
    store.close()
    return doc


def _journal(workdir: Path) -> dict[str, Any]:
    try:
        return json.loads((workdir / "slurm.json").read_text())
    except (OSError, ValueError):
        return {}


def _quantiles(values: list[float]) -> dict[str, float] | None:
    if not values:
        return None
    v = sorted(values)
    return {"p50": round(v[len(v) // 2], 3), "p90": round(v[int(len(v) * 0.9)], 3),
            "max": round(v[-1], 3), "n": len(v)}


if __name__ == "__main__":
    main()
