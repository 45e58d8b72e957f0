"""Preemption, measured on the real torch payload: a trial warned that its job ends (SIGUSR1, as
Slurm's ``--signal=B:USR1@grace`` forwarded by the batch script) checkpoints at the next batch
boundary and exits 75; the next job continues it from that batch. Runs on a GPU when there is
one (``resources.gpus: 1``), else on the CPU, with only torch, h5py and numpy importable.

Two runs of the same trial document (examples/models/deepsets_torch.py, --rows training rows,
--epochs epochs, batch --batch, 1 rank under torchrun as the local and Slurm executors start it):
  straight   uninterrupted
  warned     SIGUSR1 to the rank after --signal-at training steps (in epoch 2 by default), then
             a second run with no signal (the "next job")
Figures: the checkpoint's wall time (signal to the payload's exit), the next run's time from its
start to training again (its own start-up: interpreter, torch, CUDA, data open, state load), the
payload's ``signal_to_training_s`` (from the signal to the first training step after the
resume: the first run's end, the gap between jobs here ~0, and the second run's start), epochs
reported (lost: goal 0, twice: goal 0), and the largest difference of the final weights from the
straight run's (0 on a CPU; on a GPU within float tolerance: cuBLAS may pick other kernels).

    python benchmarks/preemption.py                 # ~1 min on a GPU node, ~2 on 2 CPU cores
    python benchmarks/preemption.py --rows 20000 --epochs 2   # the quick CPU run

Writes every figure to --out (default $OUT/preemption.json when $OUT is set, else
./preemption.json).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples"))

SIGNALLING = """
import os, signal
_calls = [0]
def training_step(model, batch, loss_fn):
    _calls[0] += 1
    if os.environ.get("SIGNAL_AT") and _calls[0] == int(os.environ["SIGNAL_AT"]):
        os.kill(os.getpid(), signal.SIGUSR1)
    x, y = batch
    out = model(x)
    return loss_fn(out, y), out
"""


def trial_doc(folder: Path, train: list[Path], val: list[Path], model: Path, args: argparse.Namespace,
              gpus: int) -> Path:
    doc = {
        "version": 1, "study": "preempt", "study_id": 1, "trial_id": 1, "trial_number": 0,
        "hparams": {"learning_rate": 0.001, "units": 64, "dropout": 0.0, "activation": "relu"},
        "model_file": str(model),
        "training": {"framework": "torch", "epochs": args.epochs, "batch_size": args.batch,
                     "loss": "binary_crossentropy", "metrics": ["accuracy", "auc"],
                     "optimizer": "adam"},
        "data": {"features": "x", "labels": "y", "train": [str(p) for p in train],
                 "validation": [str(p) for p in val]},
        "output_dir": str(folder / "outputs"), "seed": 42,
        "resources": {"cores": min(os.cpu_count() or 1, 8), "gpus": gpus}, "api": None,
        "heartbeat_s": 30, "early_stopping": False,
        "provenance": {"spec": {"name": "preempt"}, "git": "bench"},
    }
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "trial.json"
    path.write_text(json.dumps(doc))
    return path


def torchrun(trial: Path, env: dict[str, str], log: Path) -> tuple[int, float]:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc-per-node",
           "1", "--rdzv-backend", "c10d", "--rdzv-endpoint", "localhost:0", "-m",
           "payloads.train_torch", str(trial)]
    start = time.monotonic()
    with open(log, "a") as fh:
        rc = subprocess.run(cmd, cwd=trial.parent, env=env, stdout=fh, stderr=subprocess.STDOUT,
                            timeout=900).returncode
    return rc, time.monotonic() - start


def reports(trial: Path) -> list[dict]:
    lines = (trial.parent / "outputs" / "metrics.jsonl").read_text().splitlines()
    return [json.loads(x) for x in lines if x.strip()]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=400_000)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--signal-at", type=int, help="training steps before the signal "
                   "(default: the middle of epoch 2)")
    p.add_argument("--cpu", action="store_true", help="stay on the CPU even with a GPU")
    p.add_argument("--out", type=Path)
    args = p.parse_args()
    import numpy as np
    import torch
    from make_sample_data import make_sample_data

    gpus = 0 if args.cpu or not torch.cuda.is_available() else 1
    device = torch.cuda.get_device_name(0) if gpus else f"CPU ({os.cpu_count()} cores)"
    steps = args.rows // args.batch
    signal_at = args.signal_at or steps + steps // 2
    out = args.out or Path(os.environ.get("OUT") or ".") / "preemption.json"
    env = {**os.environ, "PYTHONPATH": f"{ROOT}:{os.environ.get('PYTHONPATH', '')}"}
    res: dict = {"device": device, "rows": args.rows, "epochs": args.epochs, "batch": args.batch,
                 "steps_per_epoch": steps, "signal_at_step": signal_at}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        train, val = make_sample_data(work / "data", n_train=args.rows, n_val=args.rows // 10,
                                      n_files=4)
        model = work / "signalling.py"
        model.write_text(f"exec(open({str(ROOT / 'examples/models/deepsets_torch.py')!r})"
                         ".read())\n" + SIGNALLING)
        straight = trial_doc(work / "straight", train, val, model, args, gpus)
        rc, wall = torchrun(straight, env, work / "straight.log")
        assert rc == 0, (work / "straight.log").read_text()[-3000:]
        res["straight_wall_s"] = round(wall, 2)

        warned = trial_doc(work / "warned", train, val, model, args, gpus)
        code = warned.parent / "payload_exit_code"
        first_env = {**env, "SIGNAL_AT": str(signal_at), "GRIDML_EXIT_FILE": str(code),
                     "GRIDML_SIGNAL_DIR": str(warned.parent / "ranks")}
        log = work / "warned.log"
        rc1, wall1 = torchrun(warned, first_env, log)
        assert code.read_text().strip() == "75", log.read_text()[-3000:]
        state = json.loads((warned.parent / "outputs/checkpoint/state.json").read_text())
        size = sum(f.stat().st_size for f in (warned.parent / "outputs/checkpoint").rglob("*")
                   if f.is_file())
        code.unlink()
        rc2, wall2 = torchrun(warned, env, log)
        assert rc2 == 0, log.read_text()[-3000:]
        got, want = reports(warned), reports(straight)
        epochs = [r["epoch"] for r in got]
        resumed = next(r["extra"]["resumed"] for r in got if r.get("extra", {}).get("resumed"))
        a = torch.load(warned.parent / "outputs/model.pt", weights_only=False)["state_dict"]
        b = torch.load(straight.parent / "outputs/model.pt", weights_only=False)["state_dict"]
        diff = max(float(np.max(np.abs(a[k].float().cpu().numpy() - b[k].float().cpu().numpy())))
                   for k in a)
        res.update({
            "checkpoint_at": {"epoch": state["epoch"] + 1, "batch": state["batch"]},
            "checkpoint_bytes": size, "first_job_wall_s": round(wall1, 2),
            "second_job_wall_s": round(wall2, 2),
            "signal_to_training_s": resumed["signal_to_training_s"],
            "epochs_reported": epochs,
            "epochs_lost": len(set(range(1, args.epochs + 1)) - set(epochs)),
            "epochs_twice": len(epochs) - len(set(epochs)),
            "max_weight_diff_vs_straight": diff,
            "val_loss_straight_vs_warned": [want[-1]["metrics"]["val_loss"],
                                            got[-1]["metrics"]["val_loss"]],
        })
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(res, indent=1))
    print(f"## Preemption on {device}: {args.rows:,} rows x {args.epochs} epochs, batch {args.batch}")
    print("| straight run | warned job | next job | signal to training | epochs lost | twice "
          "| max weight diff |")
    print("|---|---|---|---|---|---|---|")
    print(f"| {res['straight_wall_s']} s | {res['first_job_wall_s']} s (checkpoint in epoch "
          f"{res['checkpoint_at']['epoch']} after batch {res['checkpoint_at']['batch']}, "
          f"{size / 1e6:.2f} MB) | {res['second_job_wall_s']} s | "
          f"{res['signal_to_training_s']:.2f} s | {res['epochs_lost']} | {res['epochs_twice']} "
          f"| {diff:.2e} |")
    signal.signal(signal.SIGINT, signal.SIG_DFL)


if __name__ == "__main__":
    main()
