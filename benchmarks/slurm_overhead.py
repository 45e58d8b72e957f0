"""Controller overhead per trial on Slurm: a campaign of tiny jobs on the two-node test cluster.

    python benchmarks/slurm_overhead.py [--trials 200] [--parallel 16] [--cluster DIR]
                                        [--pack K | --array] [--compare]

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
trials waited in the queue for a slot.
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
TRIVIAL = ["bash", "-c", f"mkdir -p ../outputs && echo '{json.dumps(EPOCH)}' > ../outputs/metrics.jsonl"]


class Timed:
    """Wraps an executor and sums the time spent in each call."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.spent, self.calls = inner, defaultdict(float), defaultdict(int)
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
    args = ap.parse_args()

    cluster = args.cluster or Path(tempfile.mkdtemp(prefix="gridml-slurm-bench-"))
    started = args.cluster is None
    if started:
        subprocess.run(["bash", str(ROOT / "scripts/slurm-cluster.sh"), "start", str(cluster)],
                       check=True, capture_output=True)
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
            subprocess.run(["bash", str(ROOT / "scripts/slurm-cluster.sh"), "stop", str(cluster)],
                           capture_output=True)
            shutil.rmtree(cluster, ignore_errors=True)
        shutil.rmtree(home, ignore_errors=True)


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
    while True:
        s0 = time.perf_counter()
        over = campaign.step()
        step_s += time.perf_counter() - s0
        if over:
            break
        time.sleep(campaign.poll_s)
    wall = time.perf_counter() - t0
    executor.close()
    cli.submit = real_submit  # type: ignore[method-assign]
    trials = store.list_trials(campaign.study.id)
    done = sum(t.state == "completed" for t in trials)
    n = len(trials)
    doc = {"trials": n, "completed": done, "parallel": args.parallel, "wall_s": round(wall, 1),
           "wall_per_trial_s": round(wall / n, 3),
           "controller_s_per_trial": round(step_s / n, 4),
           "executor_s_per_trial": {k: round(v / n, 4) for k, v in executor.spent.items()},
           "executor_calls": dict(executor.calls),
           "finalize_etc_s_per_trial": round((step_s - sum(executor.spent.values())) / n, 4),
           "mode": "packed" if args.pack else "array" if args.array else "one job per trial",
           "pack": args.pack or None, "sbatch_calls": sbatch["calls"],
           "sbatch_per_trial": round(sbatch["calls"] / n, 4),
           "controller_ms_per_trial": round(1000 * step_s / n, 1)}
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
