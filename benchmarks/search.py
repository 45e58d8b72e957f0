"""Search benchmark (issues 7 and 14): every engine side by side, batch speed, early stopping.

    .venv/bin/python benchmarks/search.py [--seeds 5] [--evals 50] [--batch 4]

1. Best value after 25 and 50 evaluations (batches of 4, the searcher rebuilt from the
   observations before every batch, as the controller does) on skopt.benchmarks' branin and
   hart6 and on a mixed problem with a categorical and an int dimension, for every engine behind
   ``gridml.search.create``: bayes, optuna-gp (Optuna's GPSampler), skopt (scikit-optimize's
   Optimizer), optuna (TPE), random, evolution (CMA-ES) and grid, each with its default options.
2. Wall and CPU time of one rebuild + ``ask(8)`` (create + tell + ask) at 50, 200 and 1,000
   observations of hart6, per engine (CPU time: what a shared machine's load does not inflate) (an engine slower than ``--time-cap`` seconds at one size is not run at
   the larger ones). Goal: bayes under 1 s wall at 1,000 observations; the figure lives here
   only (the suite's tests/unit/test_search_gp.py checks what that ask returns, not its time).
3. Early stopping on recorded learning curves (scikit-learn MLPs of random learning rate and
   width, validation log-loss per epoch), replayed as a campaign of 4 trials at once: the fraction
   of epochs saved and whether the best trial ran to the end.

Issue 22 / 25 figures (2 shared cores, load 11-23 from other engineers' work: wall times are
inflated ~10x, CPU times are the comparable ones). Best value, median over 5 seeds (0-4),
batches of 4, after 50 evaluations (after 25):

| problem (minimum) | bayes before (63811a7) | bayes now | optuna-gp (Optuna's GPSampler) |
|---|---|---|---|
| branin (0.398) | 0.3983 (0.408) | 0.3980 (0.444) | not run (time) |
| hart6 (-3.322) | -3.199 (-2.833) | **-3.320** (-2.644) | -3.138 (per seed -3.077, -3.138, -3.213, -2.869, -3.304) |
| mixed cat+int (0.398) | 0.644 (2.26) | **0.519** (2.05) | not run (time) |

One rebuild + ask(8) on hart6, wall median (max) of 3 / CPU median, seconds, same load:

| engine | 50 observations | 200 observations | 1,000 observations |
|---|---|---|---|
| bayes before (63811a7) | 2.78 (3.03) / 0.22 | 3.66 (4.11) / 0.35 | 9.47 (11.34) / 0.85 |
| bayes now | 4.14 (4.23) / 0.32 | 7.92 (9.60) / 0.59 | 11.81 (12.63) / 1.00 |
| optuna-gp (1 run) | 122.5 / 11.2 | not run | 667.7 / 34.9 |
| bayes, unloaded (docs/search.md, before) | 0.16 / 0.12 | 0.73 / 0.22 | 0.48 / 0.48 |

bayes now draws a fresh candidate pool per point of a batch up to 500 observations (as before
the speed work); above 500 the code path is unchanged (one tracked pool per batch), so its
1,000-observation time is the earlier one (CPU 0.85-1.0 s under this load, 0.43-0.6 s
unloaded); the fresh pools cost ~0.1-0.25 s CPU at 200 observations. hart6 is bimodal (global
basin -3.32 or the -3.20 local minimum): over seeds 0-9 bayes now reaches the global basin on
3 of 10 (median of 10: -3.202), so the 5-seed median rests on 3 of 5 seeds. Optuna's
GPSampler (qLogEI batches, torch) is ~35x bayes's CPU per ask and worse on hart6 (median
-3.138): the hand-written engine stays for ``bayes``; ``optuna`` ``sampler: gp``
stays available. tests/unit/test_search_quality.py guards the hart6 median (<= -3.30).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gridml import search
from gridml.search.replay import best_index, replay

Problem = tuple[dict[str, Any], Callable[[dict[str, Any]], float], float]


def problems() -> dict[str, Problem]:
    """name -> (space, objective on a point, known minimum)."""
    from skopt.benchmarks import branin, hart6

    b_space = {"x1": {"type": "real", "low": -5.0, "high": 10.0},
               "x2": {"type": "real", "low": 0.0, "high": 15.0}}
    h_space = {f"x{i}": {"type": "real", "low": 0.0, "high": 1.0} for i in range(6)}
    offsets = {"a": 0.0, "b": 1.0, "c": 3.0, "d": 10.0}
    m_space = {**b_space, "kind": {"type": "categorical", "choices": list(offsets)},
               "n": {"type": "int", "low": 1, "high": 10}}

    def mixed(p: dict[str, Any]) -> float:
        return branin([p["x1"], p["x2"]]) + offsets[p["kind"]] + 0.1 * (p["n"] - 7) ** 2

    return {
        "branin": (b_space, lambda p: branin([p["x1"], p["x2"]]), 0.397887),
        "hart6": (h_space, lambda p: hart6(np.array([p[f"x{i}"] for i in range(6)])), -3.32237),
        "mixed (cat+int)": (m_space, mixed, 0.397887),
    }


# engine label -> (algorithm, options); optuna-gp is Optuna's GPSampler (issue 25's comparison)
ENGINES: dict[str, tuple[str, dict[str, Any]]] = {
    "bayes": ("bayes", {}), "optuna-gp": ("optuna", {"sampler": "gp"}), "skopt": ("skopt", {}),
    "optuna": ("optuna", {}), "random": ("random", {}), "evolution": ("evolution", {}),
    "grid": ("grid", {})}


def make(engine: str, space: dict[str, Any], seed: int) -> Any:
    algorithm, options = ENGINES[engine]
    return search.create(algorithm, space, seed=seed, **options)


def run_engine(algo: str, prob: Problem, seed: int, evals: int, batch: int) -> tuple[list, float]:
    space, f, _ = prob
    told: list[dict[str, Any]] = []
    values: list[float] = []
    spent = 0.0
    while len(told) < evals:
        t0 = time.perf_counter()
        s = make(algo, space, seed)
        s.tell(told, values)
        points = s.ask(min(batch, evals - len(told)))
        spent += time.perf_counter() - t0
        if not points:  # grid exhausted: its best stays the best
            values += [values[-1]] * (evals - len(values))
            break
        told += points
        values += [f(p) for p in points]
    return values, spent


def quality(args: argparse.Namespace) -> None:
    marks = sorted({args.evals // 2, args.evals})
    print(f"\n## Best value found ({args.seeds} seeds, batches of {args.batch}): "
          "median [25%, 75%] over seeds\n")
    head = " | ".join(f"after {m}" for m in marks)
    print(f"| problem (minimum) | engine | {head} | search time per campaign |")
    print("|---|---|" + "---|" * len(marks) + "---|")
    for name, prob in problems().items():
        if args.problems and name.split()[0] not in args.problems:
            continue
        for algo in args.algorithms:
            runs = [run_engine(algo, prob, s, args.evals, args.batch) for s in range(args.seeds)]
            cells = [_spread([min(v[:m]) for v, _ in runs]) for m in marks]
            spent = statistics.median(t for _, t in runs)
            print(f"| {name} ({prob[2]:.4g}) | {algo} | {' | '.join(cells)} | {spent:.1f} s |",
                  flush=True)


def _spread(xs: list[float]) -> str:
    q1, med, q3 = np.percentile(xs, [25, 50, 75])
    return f"{med:.4g} [{q1:.4g}, {q3:.4g}]"


def timing(args: argparse.Namespace) -> None:
    space, f, _ = problems()["hart6"]
    sizes = args.timing_obs
    print(f"\n## Time of one rebuild + ask(8) on hart6 (create + tell + ask), seconds: wall "
          f"median (max) / CPU median, of {args.reps} (1 where one takes over "
          f"{args.time_cap:.0f} s)\n")
    print("| engine | " + " | ".join(f"{n} observations" for n in sizes) + " |")
    print("|---|" + "---|" * len(sizes))
    data = {}
    for n in sizes:
        rng = np.random.default_rng(n)
        points = [{f"x{i}": float(v) for i, v in enumerate(row)} for row in rng.random((n, 6))]
        data[n] = (points, [f(p) for p in points])
    for algo in args.algorithms:
        cells, capped = [], False
        for n in sizes:
            if capped:
                cells.append("not run")
                continue
            points, y = data[n]
            times: list[float] = []
            cpu: list[float] = []
            for rep in range(args.reps):
                t0, c0 = time.perf_counter(), time.process_time()
                s = make(algo, space, rep)
                s.tell(points, y)
                s.ask(8)
                times.append(time.perf_counter() - t0)
                cpu.append(time.process_time() - c0)
                if times[-1] > args.time_cap:
                    capped = True
                    break
            cells.append(f"{statistics.median(times):.2f} ({max(times):.2f}) / "
                         f"{statistics.median(cpu):.2f}")
        print(f"| {algo} | " + " | ".join(cells) + " |", flush=True)


def record_curves(n_trials: int, epochs: int, seed: int = 0) -> list[list[float]]:
    """Validation log-loss per epoch of scikit-learn MLPs with random learning rate and width."""
    from sklearn.datasets import make_classification
    from sklearn.metrics import log_loss
    from sklearn.neural_network import MLPClassifier

    x, y = make_classification(n_samples=2500, n_features=20, n_informative=8, flip_y=0.05,
                               random_state=seed)
    rng = np.random.default_rng(seed)
    curves = []
    for t in range(n_trials):
        model = MLPClassifier((int(rng.integers(4, 64)),), batch_size=64, random_state=t,
                              learning_rate_init=10 ** rng.uniform(-4.5, -0.5))
        curve = []
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for _ in range(epochs):
                model.partial_fit(x[:2000], y[:2000], classes=[0, 1])
                curve.append(round(float(log_loss(y[2000:], model.predict_proba(x[2000:]))), 5))
        curves.append(curve)
    return curves


def stopping(args: argparse.Namespace) -> None:
    path = Path(args.curves_file) if args.curves_file else None
    if path and path.exists():
        curves = json.loads(path.read_text())
    else:
        curves = record_curves(args.curves, args.epochs)
        if path:
            path.write_text(json.dumps(curves))
    best = best_index(curves)
    print(f"\n## Early stopping on {len(curves)} recorded learning curves x {len(curves[0])} "
          f"epochs, 4 trials at once\n")
    print("| rule | epochs run | saved | trials pruned | best trial ran to the end |"
          " best value of the finished trials (best overall) |")
    print("|---|---|---|---|---|---|")
    rules: list[dict[str, Any] | None] = [None, {"rule": "median", "min_epochs": 2},
                                          {"rule": "asha", "min_epochs": 1, "reduction": 3},
                                          {"rule": "asha", "min_epochs": 2, "reduction": 2}]
    overall = min(curves[best])
    for rule in rules:
        r = replay(rule, curves, parallel=4)
        survived = best not in r.pruned
        finished = min(min(curves[t]) for t, n in r.ran.items() if n == len(curves[t]))
        name = "none" if rule is None else ", ".join(f"{k}: {v}" for k, v in rule.items())
        print(f"| {name} | {r.epochs_run}/{r.epochs_total} | {r.saved:.0%} | {len(r.pruned)} | "
              f"{'yes' if survived else 'no'} | {finished:.4f} ({overall:.4f}) |", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--evals", type=int, default=50)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--algorithms", nargs="+", default=list(ENGINES), choices=list(ENGINES))
    ap.add_argument("--problems", nargs="+", choices=["branin", "hart6", "mixed"],
                    help="only these problems (default: all)")
    ap.add_argument("--timing-obs", type=int, nargs="+", default=[50, 200, 1000])
    ap.add_argument("--reps", type=int, default=3, help="timing repetitions per engine and size")
    ap.add_argument("--time-cap", type=float, default=60.0,
                    help="an engine slower than this (s) is not timed at larger sizes")
    ap.add_argument("--curves", type=int, default=24, help="learning curves to record")
    ap.add_argument("--epochs", type=int, default=12)
    ap.add_argument("--curves-file", help="JSON file to keep the recorded curves in (reused)")
    ap.add_argument("--only", choices=["quality", "timing", "stopping"], nargs="+",
                    default=["quality", "timing", "stopping"])
    args = ap.parse_args()
    t0 = time.perf_counter()
    for part in args.only:
        {"quality": quality, "timing": timing, "stopping": stopping}[part](args)
    print(f"\n(total {time.perf_counter() - t0:.0f} s)")


if __name__ == "__main__":
    main()
