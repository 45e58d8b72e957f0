"""Horovod scaling benchmark: the real payload with 1 and 2 ranks on a compute-bound model.

Runs ``horovodrun -np N --gloo python -m payloads.train_keras trial.json`` for each N in
--workers (default 1,2) on the same sample data (in the loader's RAM cache after epoch 1), a
wide MLP (examples/models/mlp.py with --units/--layers), a fixed per-rank batch, and the cores
given as N (one core per rank). Throughput is the training samples/s the payload reports per
epoch (all ranks together), averaged over the epochs after the first (which traces the graph).
Prints throughput, speedup, parallel efficiency and input-wait fraction per N, side by side;
and, because a shared machine lends each rank only part of a core, the same per CPU-second
the ranks actually got (``CPU efficiency``: the cost of going parallel, free of the load).
Goal on this 2-core machine: >= 85% efficiency at 2 ranks.

The functions ``run_trial``, ``summarize`` and ``plot`` are what ``gridml scale`` needs:
run the same trial at several rank counts, tabulate, plot.

    python benchmarks/horovod_scaling.py [--workers 1,2] [--epochs 3] [--batch 512]
        [--framework keras|torch|both]

``--framework torch`` runs the PyTorch payload under ``torchrun`` (DistributedDataParallel,
gloo) on the same data with the same MLP written in PyTorch (TORCH_MLP below); ``both`` prints
the two tables from one run, interleaved per rank count.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples"))


def payload_env() -> dict[str, str]:
    env = dict(os.environ)
    prefix = Path(sys.prefix)
    env["PATH"] = f"{prefix / 'bin'}:{env.get('PATH', '')}"
    env["LD_LIBRARY_PATH"] = f"{prefix / 'lib'}:{env.get('LD_LIBRARY_PATH', '')}"
    env["PYTHONPATH"] = f"{ROOT}:{env.get('PYTHONPATH', '')}"
    return env


TORCH_MLP = """
import torch
from torch import nn

def build_model(hparams, input_shape):
    units, layers = int(hparams["units"]), int(hparams.get("n_layers", 3))
    act = {"relu": nn.ReLU, "tanh": nn.Tanh, "elu": nn.ELU}[hparams.get("activation", "relu")]
    mods, width = [], int(input_shape[0])
    for _ in range(layers):
        mods += [nn.Linear(width, units), act()]
        width = units
    return nn.Sequential(*mods, nn.Linear(width, 1))
"""


def run_trial(trial: dict[str, Any], ranks: int, workdir: Path,
              timeout: int = 1800) -> list[dict[str, Any]]:
    """Run ``trial`` (a trial.json dict) with ``ranks`` ranks (Horovod, or torchrun when its
    training.framework is torch); returns its epoch reports."""
    workdir.mkdir(parents=True, exist_ok=True)
    t = {**trial, "output_dir": str(workdir / "outputs"),
         "resources": {**trial.get("resources", {}), "cores": ranks}}
    path = workdir / "trial.json"
    path.write_text(json.dumps(t))
    cmd = ["horovodrun", "-np", str(ranks), "-H", f"localhost:{ranks}", "--gloo",
           sys.executable, "-m", "payloads.train_keras", str(path)]
    if trial.get("training", {}).get("framework") == "torch":
        cmd = [str(Path(sys.executable).parent / "torchrun"), "--nnodes", "1", "--nproc-per-node",
               str(ranks), "--rdzv-backend", "c10d", "--rdzv-endpoint", "localhost:0", "-m",
               "payloads.train_torch", str(path)]
    proc = subprocess.run(cmd, cwd=workdir, env=payload_env(), capture_output=True, text=True,
                          timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"{ranks} ranks failed: {proc.stderr[-2000:]}")
    lines = (workdir / "outputs" / "metrics.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


def summarize(reports: dict[int, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Per rank count: throughput (mean over epochs after the first), speedup and efficiency
    against the smallest rank count, input-wait fraction and epoch time."""
    rows = []
    for n in sorted(reports):
        steady = reports[n][1:] or reports[n]
        thr = sum(r["samples_per_s"] for r in steady) / len(steady)
        cpu = sum(sum(r["extra"].get("cpu_s_per_rank", [0])) for r in steady)
        per_cpu = sum(r["extra"]["train_samples"] for r in steady) / cpu if cpu else None
        rows.append({"ranks": n, "samples_per_s": thr, "samples_per_cpu_s": per_cpu,
                     "cpu_util": sum(r["extra"].get("cpu_util", 0) for r in steady) / len(steady),
                     "epoch_time": sum(r["epoch_time"] for r in steady) / len(steady),
                     "input_wait_frac": max(r["input_wait_frac"] for r in steady)})
    base = rows[0]
    for r in rows:
        r["speedup"] = r["samples_per_s"] / base["samples_per_s"]
        r["efficiency"] = r["speedup"] / (r["ranks"] / base["ranks"])
        # the same, per CPU-second used: free of what other processes take from a shared machine
        r["cpu_efficiency"] = (r["samples_per_cpu_s"] / base["samples_per_cpu_s"]
                               if r["samples_per_cpu_s"] and base["samples_per_cpu_s"] else None)
    return rows


def plot(rows: list[dict[str, Any]], path: Path, title: str = "scaling") -> Path:
    """Throughput, speedup (with the ideal line) and efficiency vs ranks, one PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = [r["ranks"] for r in rows]
    fig, ax = plt.subplots(1, 3, figsize=(12, 3.4))
    ax[0].plot(n, [r["samples_per_s"] for r in rows], "o-")
    ax[0].set_ylabel("samples/s")
    ax[1].plot(n, [r["speedup"] for r in rows], "o-", label="measured")
    ax[1].plot(n, [k / n[0] for k in n], "k--", label="ideal")
    ax[1].set_ylabel("speedup")
    ax[1].legend()
    ax[2].plot(n, [100 * r["efficiency"] for r in rows], "o-", label="efficiency")
    ax[2].plot(n, [100 * r["input_wait_frac"] for r in rows], "s--", label="input wait")
    ax[2].set_ylabel("%")
    ax[2].legend()
    for a in ax:
        a.set_xlabel("ranks")
        a.set_xticks(n)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def main() -> int:
    p = argparse.ArgumentParser(description="Horovod scaling benchmark")
    p.add_argument("--workers", default="1,2")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batch", type=int, default=2048, help="per rank")
    p.add_argument("--rows", type=int, default=60000)
    p.add_argument("--units", type=int, default=1024)
    p.add_argument("--layers", type=int, default=3)
    p.add_argument("--plot", type=Path, default=None, help="also write the plot here")
    p.add_argument("--gradient-compression", choices=["none", "fp16"], default="none")
    p.add_argument("--framework", choices=["keras", "torch", "both"], default="keras")
    a = p.parse_args()
    from make_sample_data import make_sample_data

    tmp = Path(tempfile.mkdtemp(prefix="gridml-scale-"))
    try:
        train, val = make_sample_data(tmp / "data", n_train=a.rows, n_val=2000, n_files=3)
        trial = {"version": 1, "study": "scale", "trial_id": 1, "trial_number": 0, "seed": 7,
                 "hparams": {"learning_rate": 1e-3, "units": a.units, "n_layers": a.layers,
                             "dropout": 0.0, "activation": "relu"},
                 "model_file": str(ROOT / "examples/models/mlp.py"),
                 "training": {"epochs": a.epochs, "batch_size": a.batch, "metrics": [],
                              "checkpoint": False, "cache_budget_mb": 256,
                              "gradient_compression": a.gradient_compression},
                 "data": {"features": "x", "labels": "y", "train": [str(x) for x in train],
                          "validation": []},
                 "api": None, "resources": {"gpus": 0}}
        frameworks = ["keras", "torch"] if a.framework == "both" else [a.framework]
        (tmp / "mlp_torch.py").write_text(TORCH_MLP)
        reports: dict[str, dict[int, list[dict[str, Any]]]] = {f: {} for f in frameworks}
        for n in (int(w) for w in a.workers.split(",")):
            for f in frameworks:  # interleaved: both see the same machine load
                t = dict(trial, training={**trial["training"], "framework": f})
                if f == "torch":
                    t["model_file"] = str(tmp / "mlp_torch.py")
                reports[f][n] = run_trial(t, n, tmp / f"{f}-np{n}")
        tables = {f: summarize(r) for f, r in reports.items()}
        if a.plot:
            plot(tables[frameworks[0]], a.plot, f"wide MLP {a.units}x{a.layers}, batch {a.batch}/rank")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"\nwide MLP ({a.units} units x {a.layers} layers), {a.rows:,} rows, batch {a.batch} per "
          f"rank, 1 core per rank, gradient compression {a.gradient_compression}, "
          f"load average after: {os.getloadavg()[0]:.1f}")
    print("| framework | ranks | samples/s | speedup | efficiency | samples per CPU-s | CPU efficiency "
          "| CPU use per rank | input wait | epoch time |\n|---|---|---|---|---|---|---|---|---|---|")
    for f, rows in tables.items():
        name = "Keras + Horovod" if f == "keras" else "PyTorch DDP"
        for r in rows:
            print(f"| {name} | {r['ranks']} | {r['samples_per_s']:,.0f} | {r['speedup']:.2f}x | "
                  f"{100 * r['efficiency']:.0f}% | {r['samples_per_cpu_s'] or 0:,.0f} | "
                  f"{100 * (r['cpu_efficiency'] or 0):.0f}% | {100 * r['cpu_util']:.0f}% | "
                  f"{100 * r['input_wait_frac']:.1f}% | {r['epoch_time']:.2f} s |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
