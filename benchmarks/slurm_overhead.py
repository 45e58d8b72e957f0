"""Controller overhead per trial on Slurm: a campaign of tiny jobs on the two-node test cluster.

    python benchmarks/slurm_overhead.py [--trials 200] [--parallel 16] [--cluster DIR]

Each trial's payload is replaced (``SlurmExecutor(payload_override=...)``, an option only this
benchmark uses) by a trivial job that writes one epoch into the trial's metrics spool and exits,
so what is measured is gridml + Slurm: plan, write trial file and batch script, ``sbatch``, the
batched ``squeue`` polls, spool ingest, output upload and the searcher (random). Reported:
wall time per trial, and the controller's own time per trial split into submit / poll / finalize
(time spent inside those calls, i.e. not counting the sleeps between cycles). Starts its own
cluster unless --cluster names a running one (scripts/slurm-cluster.sh).
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
        run(args, home)
    finally:
        if started:
            subprocess.run(["bash", str(ROOT / "scripts/slurm-cluster.sh"), "stop", str(cluster)],
                           capture_output=True)
            shutil.rmtree(cluster, ignore_errors=True)
        shutil.rmtree(home, ignore_errors=True)


def run(args: argparse.Namespace, home: Path) -> None:
    from gridml import controller as ctl
    from gridml.data import open_data_manager
    from gridml.executors.slurm.executor import SlurmExecutor
    from gridml.settings import settings
    from gridml.spec import load_spec
    from gridml.store.sql import open_sql_store
    from tests.helpers import register_tiny_datasets, write_spec

    data = open_data_manager("local")
    train, val = register_tiny_datasets(data, home, "user.bench")
    spec = write_spec(
        home / "spec.yaml", "bench", train, val,
        training="training: {epochs: 1, batch_size: 8, workers: 1}\n",
        resources="resources: {cores: 1, memory_gb: 0.1, walltime: 5m}\n",
        backend="backend: {executor: slurm, data: local, server: embedded, retries: 0}\n",
        search=f"search:\n  algorithm: random\n  max_trials: {args.trials}\n  parallel: {args.parallel}\n"
               "  space:\n    learning_rate: {type: real, low: 1.0e-4, high: 1.0e-1, log: true}\n",
        slurm="slurm: {partition: gridml}\n")
    loaded = load_spec(spec, did_exists=data.exists)
    store = open_sql_store(settings().db_url)
    executor = Timed(SlurmExecutor(journal=settings().runs_dir / ".journal" / "slurm",
                                   payload_override=TRIVIAL))
    campaign = ctl.Campaign(loaded, store, executor, data, settings().runs_dir, api_url=None, poll_s=0.5)
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
    trials = store.list_trials(campaign.study.id)
    done = sum(t.state == "completed" for t in trials)
    n = len(trials)
    doc = {"trials": n, "completed": done, "parallel": args.parallel, "wall_s": round(wall, 1),
           "wall_per_trial_s": round(wall / n, 3),
           "controller_s_per_trial": round(step_s / n, 4),
           "executor_s_per_trial": {k: round(v / n, 4) for k, v in executor.spent.items()},
           "executor_calls": dict(executor.calls),
           "finalize_etc_s_per_trial": round((step_s - sum(executor.spent.values())) / n, 4)}
    print(json.dumps(doc, indent=2))


if __name__ == "__main__":
    main()
