"""The live channel's cost per controller cycle (gridml/live.py) with many running trials.

    .venv/bin/python benchmarks/live_ingest.py [--trials 1000] [--epochs 100] [--repeat 5]

Sets up a SQLite store with ``--trials`` running trials whose spools (``metrics.jsonl``) hold
``--epochs`` reports each (as the payload writes them: metrics, profile, cache stats), ingests
them once (the first cycle of a controller that never saw them), then times:

- an **idle cycle**: nothing new in any spool (one ``stat`` per trial) plus the stall check of
  every trial (throttled reads of progress.json), as ``Campaign.step`` runs them (goal < 50 ms);
- a **restarted** controller's first cycle (offsets from ``live.json``: nothing re-read);
- a cycle where **each trial added one epoch** (one transaction for all of them), without and
  with an early-stopping rule (median: one decision.json per trial);
- epoch-to-store latency: at most one poll interval plus the cycle's cost (printed);
- the **controller's idle step** (``Campaign.step``: the trials read from the store, the live
  cycle, every trial's executor poll and stall check) with the ``--trials`` running, each
  polled through a stand-in executor that answers "running" (as Slurm's cached squeue does):
  goal < 50 ms.

Figures, 1,000 running trials (2-core machine shared with other jobs, load average 11-14, so
absolute numbers are several times a quiet machine's; before = the code as of a5dec5b, run
alternately with after): idle live cycle 35-59 ms (before 43-54 ms); controller idle step
(``Campaign.step``) 254-382 ms after vs 773-1,493 ms before, 3-4x less: the trials are read
once per idle step instead of three times (``_follow`` says when it wrote; ``_fill_slots``
when it submitted), as plain rows rather than ORM objects (``SqlStore.list_trials``), and a
trial whose heartbeat is recent gets no read of its outputs folder (``Campaign._silent``). What
is left is that one read (70% of the step: converting 1,000 rows) and one ``stat`` per spool.

Epochs run by pruned trials, local vs Slurm, for the same curves (the deterministic two-trial
campaign of tests/integration/test_live_channel.py and tests/slurm/test_slurm_live.py, one that
learns, one that never does; 3 epochs): median {min_epochs: 1, min_trials: 1}: 1 local, 1 Slurm;
ASHA {min_epochs: 1, reduction: 2}: 1 local, 1 Slurm (the tests assert it).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gridml.layout import RunsLayout  # noqa: E402
from gridml.live import LiveChannel  # noqa: E402
from gridml.store import open_store  # noqa: E402
from gridml.executors.base import TaskStatus  # noqa: E402


class RunningExecutor:
    """Every trial running (what the controller's idle step sees of a busy Slurm cluster)."""

    name, remote, watch_heartbeats = "bench", False, False

    def submit(self, req: object) -> str:
        raise AssertionError("the benchmark's trials are all running")

    def poll(self, handle: str) -> TaskStatus:
        return TaskStatus("running")

    def kill(self, handle: str) -> None:
        return None

    def close(self) -> None:
        return None


def controller_step(tmp: Path, n: int, repeat: int) -> list[float]:
    """ms per idle ``Campaign.step`` with ``n`` running trials (one spooled epoch each)."""
    from gridml.controller import Campaign
    from gridml.data import open_data_manager
    from gridml.spec import load_spec

    spec = tmp / "step.yaml"
    spec.write_text(f"""name: step
payload: {{model: {ROOT / 'examples' / 'models' / 'mlp.py'}}}
data: {{train: user.b:train, validation: user.b:val, features: x, labels: y}}
training: {{epochs: 100}}
search: {{algorithm: random, objective: val_loss, max_trials: {n}, parallel: {n},
          space: {{u: {{type: int, low: 1, high: 9}}}}}}
backend: {{executor: local, data: local, server: embedded}}
""")
    store = open_store(f"sqlite:///{tmp / 'step.sqlite'}")
    c = Campaign(load_spec(spec), store, RunningExecutor(),  # type: ignore[arg-type]
                 open_data_manager("local"), tmp / "step-runs")
    for i in range(n):
        t = store.create_trial(c.study.id, {"u": 1 + i % 9})
        store.update_trial(t.id, state="running", external_id=f"bench:{i}", attempts=1)
        out = c.paths.trial_outputs(t.number)
        out.mkdir(parents=True)
        (out / "metrics.jsonl").write_text(report(1, t.number))
    c.step()  # spools read, stall watches started
    c.step()
    ms = timed(c.step, repeat)
    store.close()
    return ms


def report(epoch: int, trial: int) -> str:
    loss = 0.7 / (1 + 0.05 * epoch) + 0.001 * trial
    body = {"epoch": epoch, "epoch_time": 12.5, "samples_per_s": 48000.0, "input_wait_frac": 0.02,
            "peak_rss_mb": 2100.0, "threads": 4,
            "metrics": {"loss": loss, "val_loss": loss + 0.01, "accuracy": 0.8, "val_auc": 0.85,
                        "n_params": 120000.0, "model_mb": 0.5},
            "extra": {"cache": {"hit_rate": 0.99, "used_mb": 800.0}, "cpu_util": 0.9,
                      "ranks": 4, "train_samples": 600000}}
    return json.dumps(body, sort_keys=True) + "\n"


def timed(fn, repeat: int) -> list[float]:  # type: ignore[no-untyped-def]
    out = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        out.append(1000 * (time.perf_counter() - t0))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=1000)
    ap.add_argument("--epochs", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--rule-trials", type=int, default=50,
                    help="trials that add an epoch in the early-stopping cycles (0: skip them); "
                    "the rule compares each with every trial's curve: O(trials x all x epochs)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp_:
        tmp = Path(tmp_)
        store = open_store(f"sqlite:///{tmp / 'db.sqlite'}")
        study = store.create_study("bench", {"name": "bench"}, "h")
        trials = [store.create_trial(study.id, {"i": i}, state="running")
                  for i in range(args.trials)]
        paths = RunsLayout(tmp / "runs").study("bench")
        for t in trials:
            out = paths.trial_outputs(t.number)
            out.mkdir(parents=True)
            (out / "metrics.jsonl").write_text(
                "".join(report(e, t.number) for e in range(1, args.epochs + 1)))
        search = {"objective": "val_loss", "direction": "minimize"}
        live = LiveChannel(store, study.id, paths, search, "30m")
        print(f"{args.trials} running trials x {args.epochs} spooled epochs "
              f"({sum((paths.trial_outputs(t.number) / 'metrics.jsonl').stat().st_size for t in trials) / 1e6:.1f} MB)")
        t0 = time.perf_counter()
        n = live.cycle(trials)
        print(f"first cycle (everything new, {n} reports): {time.perf_counter() - t0:.2f} s")

        def idle() -> None:
            live.cycle(trials)
            for t in trials:
                live.stalled(t)

        idle()  # the stall watches start
        ms = timed(idle, args.repeat)
        spools = [paths.trial_outputs(t.number) / "metrics.jsonl" for t in trials]
        stat_ms = timed(lambda: [os.stat(p) for p in spools], args.repeat)
        print(f"(this machine: {len(spools)} os.stat calls alone take "
              f"{statistics.median(stat_ms):.1f} ms)")
        print(f"idle cycle (stat per spool + stall checks): median {statistics.median(ms):.1f} ms "
              f"(min {min(ms):.1f}, max {max(ms):.1f}); goal < 50 ms")
        again = LiveChannel(store, study.id, paths, search, "30m")
        ms = timed(lambda: again.cycle(trials), 1)
        print(f"restarted controller's first cycle (offsets from live.json): {ms[0]:.1f} ms")

        last = [args.epochs]

        def one_more(channel: LiveChannel) -> float:
            last[0] += 1
            for t in trials:
                with open(paths.trial_outputs(t.number) / "metrics.jsonl", "a") as f:
                    f.write(report(last[0], t.number))
            t0 = time.perf_counter()
            got = channel.cycle(trials)
            assert got == len(trials), got
            return 1000 * (time.perf_counter() - t0)

        ms = [one_more(again) for _ in range(args.repeat)]
        new_bytes = len(report(args.epochs + 1, 0)) * len(trials)
        print(f"one new epoch per trial ({new_bytes / 1e3:.0f} kB new): median "
              f"{statistics.median(ms):.1f} ms ({statistics.median(ms) / len(trials) * 1000:.0f} "
              f"us per trial)")
        if not args.rule_trials:
            store.close()
            ms = controller_step(tmp, args.trials, args.repeat)
            print(f"controller idle step (Campaign.step, {args.trials} running trials): median "
                  f"{statistics.median(ms):.1f} ms (min {min(ms):.1f}); goal < 50 ms")
            return
        rule = {**search, "early_stopping": {"rule": "median", "min_epochs": 2, "min_trials": 3}}
        trials = trials[:args.rule_trials]
        ruled = LiveChannel(store, study.id, paths, rule, "30m")
        t0 = time.perf_counter()
        ruled.cycle(trials)  # curves loaded, first decisions written
        print(f"early stopping: first cycle (every curve loaded, {len(trials)} decisions): "
              f"{time.perf_counter() - t0:.2f} s")
        ms = [one_more(ruled) for _ in range(args.repeat)]
        print(f"{len(trials)} trials add an epoch, with early stopping (median rule against "
              f"{args.trials} curves, {len(trials)} decision.json written): median "
              f"{statistics.median(ms):.1f} ms")
        print("epoch-to-store latency: <= Campaign.poll_s (2 s by default) + one cycle")
        store.close()
        ms = controller_step(tmp, args.trials, args.repeat)
        print(f"controller idle step (Campaign.step, {args.trials} running trials): median "
              f"{statistics.median(ms):.1f} ms (min {min(ms):.1f}); goal < 50 ms")


if __name__ == "__main__":
    main()
