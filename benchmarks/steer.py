"""Steering benchmark: gridml's engine inside iDDS's loop vs inside gridml's own controller loop.

    .venv/bin/python benchmarks/steer.py [--seeds 3] [--evals 24] [--batch 4] [--algorithm bayes]

iDDS-style: every step is a fresh ``gridml steer --in IN --out OUT --num-points B --max-points N``
process (as iDDS runs the steering container each step), IN holding every point so far with its
Hartmann6 loss (skopt.benchmarks.hart6, minimum -3.32237), OUT read back and evaluated. gridml's
loop: the same engine rebuilt from the observations before every batch in this process
(``gridml.search.create`` + tell + ask, as the controller's ``propose`` does), same batch size
and budget. Prints the median [25%, 75%] best loss over seeds for both, and the median wall time
of one step: the fresh process (interpreter start, imports, engine) and the in-process rebuild.
Bounded: the defaults take a minute or two.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gridml import search  # noqa: E402

SPACE = {f"x{i}": {"type": "real", "low": 0.0, "high": 1.0} for i in range(6)}
MINIMUM = -3.32237


def hart6(p: dict[str, Any]) -> float:
    from skopt.benchmarks import hart6 as f

    return float(f(np.array([p[f"x{i}"] for i in range(6)])))


def idds_loop(algo: str, seed: int, evals: int, batch: int, tmp: Path) -> tuple[list[float], list[float]]:
    """(losses in order, wall seconds of each steering step)."""
    points: list[list[Any]] = []
    steps: list[float] = []
    gridml = [sys.executable, "-m", "gridml.cli"]
    while len(points) < evals:
        in_path, out_path = tmp / f"in-{seed}.json", tmp / f"out-{seed}.json"
        in_path.write_text(json.dumps({"points": points, "opt_space": SPACE}))
        t0 = time.perf_counter()
        subprocess.run([*gridml, "steer", "--in", str(in_path), "--out", str(out_path),
                        "--num-points", str(batch), "--max-points", str(evals),
                        "--algorithm", algo, "--seed", str(seed)],
                       check=True, capture_output=True, cwd=ROOT)
        steps.append(time.perf_counter() - t0)
        new = json.loads(out_path.read_text())
        if not new:
            break
        points += [[p, hart6(p)] for p in new]
    return [loss for _, loss in points], steps


def gridml_loop(algo: str, seed: int, evals: int, batch: int) -> tuple[list[float], list[float]]:
    told: list[dict[str, Any]] = []
    values: list[float] = []
    steps: list[float] = []
    while len(told) < evals:
        t0 = time.perf_counter()
        s = search.create(algo, SPACE, seed=seed)
        s.tell(told, values)
        new = s.ask(min(batch, evals - len(told)))
        steps.append(time.perf_counter() - t0)
        if not new:
            break
        told += new
        values += [hart6(p) for p in new]
    return values, steps


def spread(xs: list[float]) -> str:
    q = np.percentile(xs, [25, 50, 75])
    return f"{q[1]:.3f} [{q[0]:.3f}, {q[2]:.3f}]"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--evals", type=int, default=24)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--algorithm", default="bayes")
    args = ap.parse_args()
    rows = {}
    with tempfile.TemporaryDirectory(prefix="gridml-steer-") as tmp:
        for name, run in (("iDDS loop (fresh `gridml steer` per step)",
                           lambda s: idds_loop(args.algorithm, s, args.evals, args.batch, Path(tmp))),
                          ("gridml controller loop (in process)",
                           lambda s: gridml_loop(args.algorithm, s, args.evals, args.batch))):
            runs = [run(s) for s in range(args.seeds)]
            rows[name] = runs
    half = args.evals // 2
    print(f"\n## {args.algorithm} on hart6 (minimum {MINIMUM}), {args.seeds} seeds, batches of "
          f"{args.batch}: median [25%, 75%] best loss\n")
    print(f"| loop | after {half} | after {args.evals} | median time per step |")
    print("|---|---|---|---|")
    for name, runs in rows.items():
        steps = [t for _, ts in runs for t in ts]
        print(f"| {name} | {spread([min(v[:half]) for v, _ in runs])} | "
              f"{spread([min(v) for v, _ in runs])} | {statistics.median(steps):.2f} s |")


if __name__ == "__main__":
    main()
