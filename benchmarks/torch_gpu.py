"""PyTorch payload on a GPU: samples/s, input-wait fraction and GPU utilisation, end to end and
gridml's loader vs the naive DataLoader, for the quickstart model and a wide one.

Needs only Python, PyTorch, h5py, numpy and this repository (``payloads/`` and
``examples/make_sample_data.py``): no TensorFlow, no gridml controller packages, no network, as on
a GPU node with its own PyTorch. Runs on CUDA when there is a GPU, else on the CPU (the figures
are then a dry run of the script, not of a GPU).

Data: chunked HDF5 like the quickstart sample data (``x`` (N, 10) float32, ``y`` (N,) float32,
chunks of --chunk-rows rows, gzip level 4 with byte shuffle unless --compression says otherwise,
the toy tau/jet events of examples/make_sample_data.py) written to a temporary directory:
--rows training rows in --files files and a tenth as many validation rows.

Models: ``quickstart``, examples/models/deepsets_torch.py (the model of
examples/quickstart_torch.yaml) with units 64, dropout 0.1, relu; ``wide``, an MLP of --wide-layers
Linear(--wide-units) + ReLU layers (input standardised), written into the temporary directory.
Loss binary cross-entropy, Adam lr 1e-3, batch --batch per rank, --mixed-precision as the trial's
``training.mixed_precision``.

Part A, end to end: a trial document (contract v2, payloads/runtime/trial.py) per model, run by
the real payload exactly as gridml's local executor starts it (``python -m torch.distributed.run
--nnodes 1 --nproc-per-node R --rdzv-backend c10d --rdzv-endpoint localhost:0 -m
payloads.train_torch trial.json``; R = --ranks, default the GPUs, 1 on a CPU; ``resources.gpus`` =
R on CUDA, the machine's cores as ``resources.cores``; api null: reports only to metrics.jsonl).
From each epoch's report in metrics.jsonl: ``samples_per_s`` (training rows of all ranks /
training time, validation excluded), ``input_wait_frac`` (largest over ranks of time blocked on the
next slab / epoch time), ``epoch_time`` (validation and metric reductions included) and
``extra.cpu_util``. Epoch 1 (CUDA start-up, first read and gzip decode of every chunk, the RAM
cache filling) is shown apart from the mean of the later epochs (steady state, chunks from the
cache). "payload wall" is the whole torchrun run: start-up, all epochs, model.pt/ONNX export.
With --defer 16,1,1,16 part A runs each model once per value, in that order, with the payload's
metrics counting that many batches at once on the GPU (torch_model.DEFER; 1 counts each batch as
it comes, as before DEFER): the rows "defer=N #k" side by side say what deferring buys.

Part B, side by side in this process: the same model, optimizer and precision in a plain
training loop (zero_grad, forward, loss, backward, step; no metrics) fed three ways:
  gridml   the torch payload's feed: ``session.open_data`` of the same trial document
           (ShardedLoader, its reader processes and gather threads as the payload sizes them)
           through ``payloads.runtime.torch_fit.batches`` (slabs in pinned memory on CUDA, one
           non-blocking copy per slab, batches are views); first epoch after --warmup steps,
           so chunks are read and decoded (no cache hits), at most --seconds-b seconds
  memory   one batch already on the device, repeated for as many steps: the compute ceiling
  naive    how users usually write it: a ``torch.utils.data.Dataset`` whose ``__getitem__``
           reads one row from h5py, under ``DataLoader(batch_size, shuffle=True,
           num_workers=--naive-workers, pin_memory=True on CUDA)``, copied with
           ``non_blocking=True``; timed for --seconds-naive (a full epoch takes far longer)
samples/s = rows trained / wall time of the timed steps (the device synchronised at both ends);
input wait = time blocked in ``next(batch)`` (including the host-to-device copy's launch) / that
wall time. Part B's gridml row is the first epoch, Part A's later epochs the steady state.

GPU utilisation: ``nvidia-smi --query-gpu=timestamp,index,utilization.gpu,memory.used
--format=csv,noheader,nounits -lms 200`` sampled in a background process for the whole run, then
averaged over each measured window (Part A: from the end of epoch 1 to the end of the last
epoch, or the whole run with one epoch; Part B: the timed steps); without nvidia-smi,
``torch.cuda.utilization()`` (needs pynvml) from a thread; "n/a" on a CPU. utilization.gpu is the
share of time at least one kernel ran, not how full the GPU was: a small model at batch 256 can
read high while using a sliver of an H100. memory.used is the whole GPU's (this script's own
CUDA context, about 0.5 GB, included). With several GPUs the busiest one is shown (all in the
JSON).

Prints the machine and markdown tables; writes every figure (per-epoch reports, trial documents,
GPU samples per window) to --out (default ``$OUT/torch_gpu.json`` when $OUT is set, else
./torch_gpu.json), rewritten after each measurement so a run cut short still leaves its figures,
and the payload logs beside it (``torch_gpu_logs/``). Every subprocess has a time limit, and the
whole run keeps to --budget-s (pieces that no longer fit are skipped and say so).

    python benchmarks/torch_gpu.py                      # on the GPU node, ~5 min on one H100
    python benchmarks/torch_gpu.py --quick              # ~1-2 min on a 2-core CPU
    python benchmarks/torch_gpu.py --mixed-precision bf16 --batch 1024
"""

from __future__ import annotations

import argparse
import bisect
import datetime
import importlib.util
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "examples"))

QUICKSTART_MODEL = ROOT / "examples/models/deepsets_torch.py"
QUICKSTART_HPARAMS = {"learning_rate": 1e-3, "units": 64, "dropout": 0.1, "activation": "relu"}

WIDE_MODEL = '''"""A wide MLP (benchmarks/torch_gpu.py): ``layers`` x (Linear(units) + ReLU), input standardised."""
import numpy as np
import torch
from torch import nn


class Wide(nn.Module):
    def __init__(self, n_in: int, units: int, layers: int) -> None:
        super().__init__()
        self.register_buffer("mean", torch.zeros(n_in))
        self.register_buffer("std", torch.ones(n_in))
        mods = []
        for i in range(layers):
            mods += [nn.Linear(n_in if i == 0 else units, units), nn.ReLU()]
        self.net = nn.Sequential(*mods, nn.Linear(units, 1))

    def adapt(self, samples):
        x = np.asarray(samples[0], dtype=np.float64)
        self.mean.copy_(torch.as_tensor(x.mean(0), dtype=torch.float32))
        self.std.copy_(torch.as_tensor(x.std(0) + 1e-6, dtype=torch.float32))

    def forward(self, x):
        return self.net((x - self.mean) / self.std)


def build_model(hparams, input_shape):
    return Wide(int(input_shape[0]), int(hparams.get("units", 1024)), int(hparams.get("layers", 4)))
'''

NEEDED = ("numpy", "h5py", "torch")
EPOCH_LINE = re.compile(r"\[payload r0\] epoch (\d+): ")


class Missing(RuntimeError):
    pass


def check_requirements() -> None:
    """Clear errors up front: the three packages, and the repository pieces the script uses."""
    missing = [m for m in NEEDED if importlib.util.find_spec(m) is None]
    if missing:
        raise Missing(f"{', '.join(missing)} not importable by {sys.executable}: this benchmark "
                      "needs Python with torch, h5py and numpy (nothing else)")
    for rel in ("payloads/train_torch.py", "payloads/runtime/torch_fit.py",
                "examples/make_sample_data.py", "examples/models/deepsets_torch.py"):
        if not (ROOT / rel).is_file():
            raise Missing(f"{ROOT / rel} is missing: run from a complete gridml checkout")


# ---- data ----------------------------------------------------------------------------------------
def compression_kwargs(name: str) -> dict[str, Any]:
    return {"gzip": {"compression": "gzip", "compression_opts": 4, "shuffle": True},
            "lzf": {"compression": "lzf", "shuffle": True}, "none": {}}[name]


def write_split(folder: Path, prefix: str, rows: int, files: int, chunk: int,
                compression: str, seed: int) -> list[Path]:
    """``files`` chunked HDF5 files with ``x`` (n, 10) and ``y`` (n,) float32 of the sample data's
    toy events, written piece by piece (bounded memory)."""
    import h5py
    import numpy as np
    from make_sample_data import FEATURES, make_events

    rng = np.random.default_rng(seed)
    bounds = np.linspace(0, rows, files + 1).astype(int)
    kw = compression_kwargs(compression)
    out = []
    for i, (a, b) in enumerate(zip(bounds[:-1], bounds[1:])):
        n = int(b - a)
        if n <= 0:
            continue
        path = folder / f"{prefix}_{i:03d}.h5"
        c = max(1, min(chunk, n))
        with h5py.File(path, "w") as f:
            x = f.create_dataset("x", (n, len(FEATURES)), np.float32, chunks=(c, len(FEATURES)), **kw)
            y = f.create_dataset("y", (n,), np.float32, chunks=(c,), **kw)
            for s in range(0, n, 1 << 18):
                e = min(n, s + (1 << 18))
                xs, ys = make_events(rng, e - s)
                x[s:e], y[s:e] = xs, ys
        out.append(path)
    return out


# ---- GPU utilisation -------------------------------------------------------------------------------
def parse_smi(text: str) -> list[tuple[float, int, float, float]]:
    """Lines ``timestamp, index, utilization.gpu, memory.used`` of nvidia-smi (csv, noheader,
    nounits) -> (unix time, GPU index, util %, memory MiB); unparsable lines are skipped."""
    out = []
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != 4:
            continue
        t = _stamp(parts[0])
        try:
            if t is not None:
                out.append((t, int(parts[1]), float(parts[2]), float(parts[3])))
        except ValueError:
            continue
    return out


def _stamp(text: str) -> float | None:
    """nvidia-smi's local-time stamp (``2024/05/01 12:34:56.789``) as unix time."""
    for f in ("%Y/%m/%d %H:%M:%S.%f", "%Y/%m/%d %H:%M:%S", "%Y-%m-%d %H:%M:%S.%f",
              "%Y-%m-%dT%H:%M:%S.%f"):
        try:
            return datetime.datetime.strptime(text, f).timestamp()
        except ValueError:
            pass
    return None


def summarize(samples: list[tuple[float, int, float, float]], t0: float,
              t1: float) -> dict[str, Any] | None:
    """Samples in [t0, t1]: per GPU mean/max utilisation and peak memory; the headline is the
    busiest GPU (the one a single-GPU run used)."""
    per: dict[int, list[tuple[float, float]]] = {}
    for t, i, u, m in samples:
        if t0 <= t <= t1:
            per.setdefault(i, []).append((u, m))
    if not per:
        return None
    gpus = {i: {"util_mean": round(sum(u for u, _ in v) / len(v), 1),
                "util_max": max(u for u, _ in v), "mem_max_mib": max(m for _, m in v),
                "samples": len(v)} for i, v in sorted(per.items())}
    busiest = max(gpus, key=lambda i: gpus[i]["util_mean"])
    return {**gpus[busiest], "gpu": busiest, "per_gpu": gpus}


class GpuSampler:
    """nvidia-smi in the background (to a file), or torch.cuda.utilization() from a thread."""

    def __init__(self, folder: Path, limit_s: float, cuda: bool) -> None:
        self.path, self.limit_s, self.cuda = folder / "nvidia-smi.csv", limit_s, cuda
        self.kind: str | None = None
        self.proc: subprocess.Popen | None = None
        self.fh: Any = None
        self.thread: threading.Thread | None = None
        self.stop_evt = threading.Event()
        self.rows: list[tuple[float, int, float, float]] = []
        self.windows: list[tuple[dict[str, Any], float, float]] = []

    def start(self) -> None:
        if not self.cuda:
            return
        smi = shutil.which("nvidia-smi")
        if smi:
            cmd = [smi, "--query-gpu=timestamp,index,utilization.gpu,memory.used",
                   "--format=csv,noheader,nounits", "-lms", "200"]
            if shutil.which("timeout"):  # never outlives the run, whatever happens to us
                cmd = ["timeout", str(int(self.limit_s) + 60), *cmd]
            self.fh = open(self.path, "w")
            self.proc = subprocess.Popen(cmd, stdout=self.fh, stderr=subprocess.DEVNULL,
                                         preexec_fn=_die_with_parent)
            self.kind = "nvidia-smi"
            return
        import torch

        try:
            torch.cuda.utilization(0)
        except Exception:
            return  # no NVML (pynvml) either: n/a
        self.kind = "torch.cuda.utilization"
        self.thread = threading.Thread(target=self._poll, daemon=True)
        self.thread.start()

    def _poll(self) -> None:
        import torch

        while not self.stop_evt.wait(0.2):
            try:
                free, total = torch.cuda.mem_get_info(0)
                self.rows.append((time.time(), 0, float(torch.cuda.utilization(0)),
                                  (total - free) / 2**20))
            except Exception:
                return

    def window(self, t0: float, t1: float) -> dict[str, Any] | None:
        if self.kind == "nvidia-smi":
            if self.fh is not None:
                self.fh.flush()
            try:
                self.rows = parse_smi(self.path.read_text())
            except OSError:
                return None
        return summarize(list(self.rows), t0, t1)

    def measure(self, into: dict[str, Any], t0: float, t1: float) -> None:
        """``into["gpu"]``: the window's figures now, and again by :meth:`stop` (when
        nvidia-smi's output is complete: it may sit in its buffer meanwhile)."""
        into["gpu"] = self.window(t0, t1)
        into["gpu_window_s"] = [round(t0, 3), round(t1, 3)]
        self.windows.append((into, t0, t1))

    def stop(self) -> None:
        self.stop_evt.set()
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        if self.fh is not None:
            self.fh.close()
            self.fh = None
        for into, t0, t1 in self.windows:
            into["gpu"] = self.window(t0, t1)


def _die_with_parent() -> None:
    """In a child before exec: killed when this script dies (PR_SET_PDEATHSIG), so a run cut
    short by the machine's time limit leaves no torchrun or nvidia-smi behind."""
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            ctypes.CDLL(None).prctl(1, int(signal.SIGKILL), 0, 0, 0)
        except (OSError, AttributeError):
            pass


# ---- the trial document ------------------------------------------------------------------------------
def make_trial(folder: Path, name: str, model: Path, hparams: dict[str, Any], train: list[Path],
               val: list[Path], a: argparse.Namespace, ranks: int, cuda: bool, cores: int) -> Path:
    from payloads.runtime.trial import Data, Resources, Training, TrainingOptions, TrialDoc

    mp: Any = {"false": False, "fp16": "fp16", "bf16": "bf16"}[a.mixed_precision]
    doc = TrialDoc(
        study="bench-torch-gpu", trial_id=1, trial_number=0, hparams=dict(hparams),
        model_file=model, output_dir=folder / "outputs", seed=1,
        training=Training(framework="torch", epochs=a.epochs, batch_size=a.batch,
                          loss="binary_crossentropy", metrics=("accuracy", "auc"),
                          optimizer="adam", mixed_precision=mp, workers=ranks,
                          options=TrainingOptions(reader_processes=a.reader_processes)),
        data=Data(features=("x",), labels="y", train=tuple(map(str, train)),
                  validation=tuple(map(str, val))),
        resources=Resources(cores=cores, gpus=ranks if cuda else 0),
        api=None, heartbeat_s=30.0,
        provenance={"benchmark": "benchmarks/torch_gpu.py", "model": name})
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "trial.json"
    path.write_text(doc.dumps())
    return path


# ---- Part A: the payload end to end ----------------------------------------------------------------
DEFER_LAUNCHER = """import runpy
from payloads.runtime import torch_model
torch_model.DEFER = {defer}
runpy.run_module("payloads.train_torch", run_name="__main__", alter_sys=True)
"""


def run_payload(trial: Path, ranks: int, timeout: float, log_path: Path,
                defer: int | None = None) -> dict[str, Any]:
    """torchrun around ``-m payloads.train_torch`` as gridml's planner starts it; rank 0's epoch
    log lines are time-stamped as they arrive (the GPU windows). With ``defer``, torchrun runs a
    two-line script that sets ``torch_model.DEFER`` and then runs the same module."""
    if defer is None:
        target = ["-m", "payloads.train_torch"]
    else:
        launcher = trial.parent / f"train_torch_defer{defer}.py"
        launcher.write_text(DEFER_LAUNCHER.format(defer=int(defer)))
        target = [str(launcher)]
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc-per-node",
           str(ranks), "--rdzv-backend", "c10d", "--rdzv-endpoint", "localhost:0", *target,
           str(trial)]
    exit_file = trial.parent / "payload_exit_code"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]),
        GRIDML_EXIT_FILE=str(exit_file), PYTHONUNBUFFERED="1")
    marks: list[tuple[int, float]] = []
    lines: list[str] = []
    t0 = time.time()
    proc = subprocess.Popen(cmd, cwd=trial.parent, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True,
                            preexec_fn=_die_with_parent)

    def read() -> None:
        assert proc.stdout is not None
        with open(log_path, "w") as log:
            for line in proc.stdout:
                log.write(line)
                lines.append(line.rstrip("\n"))
                m = EPOCH_LINE.search(line)
                if m:
                    marks.append((int(m.group(1)), time.time()))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    timed_out = False
    try:
        rc = proc.wait(timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        os.killpg(proc.pid, signal.SIGKILL)
        rc = proc.wait(30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    reader.join(10)
    code = rc
    if rc != 0 and exit_file.exists():
        try:
            code = int(exit_file.read_text().strip() or rc)
        except ValueError:
            pass
    reason = next((ln for ln in reversed(lines) if "gridml payload error" in ln),
                  lines[-1] if lines else "")
    return {"rc": code, "timed_out": timed_out, "start": t0, "end": time.time(),
            "wall_s": round(time.time() - t0, 2), "epoch_marks": marks,
            "error": None if rc == 0 else (f"timed out after {timeout:.0f} s" if timed_out
                                           else reason[-300:]),
            "log_tail": lines[-40:]}


def read_reports(out: Path) -> list[dict[str, Any]]:
    path = out / "metrics.jsonl"
    if not path.exists():
        return []
    reports = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    last: dict[int, dict[str, Any]] = {r["epoch"]: r for r in reports}  # the last one per epoch
    return [last[e] for e in sorted(last)]


def part_a_summary(run: dict[str, Any], reports: list[dict[str, Any]],
                   sampler: GpuSampler) -> dict[str, Any]:
    def mean(key: str, rs: list[dict[str, Any]]) -> float | None:
        vals = [float(r[key]) for r in rs if r.get(key) is not None]
        return sum(vals) / len(vals) if vals else None

    later = reports[1:]
    marks = dict(run["epoch_marks"])
    if len(reports) >= 2 and 1 in marks and max(marks) > 1:
        n = max(marks)
        t0, t1, what = marks[1], marks[n], f"epochs 2-{n}" if n > 2 else "epoch 2"
    else:
        t0, t1, what = run["start"], run["end"], "whole run"
    first = reports[0] if reports else {}
    metrics = (reports[-1].get("metrics") if reports else None) or {}
    return {
        "gpu_span": (t0, t1),
        "epochs": len(reports),
        "epoch1": {k: first.get(k) for k in ("samples_per_s", "input_wait_frac", "epoch_time")},
        "later": {k: mean(k, later) for k in ("samples_per_s", "input_wait_frac", "epoch_time")}
        if later else None,
        "cpu_util_later": mean("cpu_util", [r.get("extra", {}) for r in later]) if later else None,
        "device": first.get("extra", {}).get("device"),
        "precision": first.get("extra", {}).get("precision"),
        "n_params": metrics.get("n_params"), "val_auc": metrics.get("val_auc"),
        "gpu_window": what,
    }


# ---- Part B: feeds side by side ------------------------------------------------------------------
class H5PerSample:
    """The usual user code: one h5py read per sample, the files opened lazily in each worker."""

    def __init__(self, files: list[str] | list[Path]) -> None:
        import h5py

        self.files = [str(f) for f in files]
        self.h: list[Any] | None = None
        self.offsets = [0]
        for f in self.files:
            with h5py.File(f, "r") as h:
                self.offsets.append(self.offsets[-1] + h["y"].shape[0])

    def __len__(self) -> int:
        return self.offsets[-1]

    def __getitem__(self, j: int) -> tuple[Any, Any]:
        if self.h is None:
            import h5py

            self.h = [h5py.File(f, "r") for f in self.files]
        k = bisect.bisect_right(self.offsets, j) - 1
        f, i = self.h[k], j - self.offsets[k]
        return f["x"][i], f["y"][i]


class Trainer:
    """The payload's model, optimizer, loss and precision in a plain loop."""

    def __init__(self, model_file: Path, hparams: dict[str, Any], head: dict[str, Any],
                 device: Any, mixed_precision: Any) -> None:
        import torch

        from payloads.runtime import torch_fit, torch_model

        self.torch, self.device = torch, device
        user = torch_model.load(model_file)
        torch.manual_seed(1)
        self.model = torch_model.build(user, model_file, hparams, tuple(head["x"].shape[1:]))
        adapt = getattr(self.model, "adapt", None)
        if callable(adapt):
            adapt([head["x"]])
        self.model.to(device).train()
        self.n_params = sum(p.numel() for p in self.model.parameters())
        self.opt = torch_model.optimizer("adam", self.model.parameters(),
                                         float(hparams.get("learning_rate", 1e-3)), hparams)
        self.loss_fn = torch_model.loss_fn("binary_crossentropy")
        self.amp, scaler, self.precision = torch_fit.precision(mixed_precision, device)
        self.scaler = torch.amp.GradScaler(device.type, enabled=scaler)

    def step(self, x: tuple[Any, ...], y: Any) -> None:
        torch = self.torch
        self.opt.zero_grad(set_to_none=True)
        ctx = (torch.autocast(device_type=self.device.type, dtype=self.amp) if self.amp
               else _Null())
        with ctx:
            loss = self.loss_fn(self.model(*x), y)
        self.scaler.scale(loss).backward()
        self.scaler.step(self.opt)
        self.scaler.update()

    def sync(self) -> None:
        if self.device.type == "cuda":
            self.torch.cuda.synchronize(self.device)


class _Null:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: Any) -> None:
        return None


def timed(trainer: Trainer, it: Any, warmup: int, max_steps: int, seconds: float,
          sampler: GpuSampler) -> dict[str, Any]:
    """``warmup`` untimed steps, then up to ``max_steps`` steps or ``seconds``: samples/s and the
    share of the wall time blocked in ``next(it)``."""
    for _ in range(warmup):
        x, y = next(it)
        trainer.step(x, y)
    trainer.sync()
    w0, t0 = time.time(), time.perf_counter()
    wait, rows, steps = 0.0, 0, 0
    while steps < max_steps:
        a = time.perf_counter()
        try:
            x, y = next(it)
        except StopIteration:
            break
        wait += time.perf_counter() - a
        trainer.step(x, y)
        rows += int(y.shape[0])
        steps += 1
        if time.perf_counter() - t0 > seconds:
            break
    trainer.sync()
    dt = time.perf_counter() - t0
    out = {"samples_per_s": rows / dt if dt else None, "input_wait_frac": wait / dt if dt else None,
           "samples": rows, "steps": steps, "seconds": round(dt, 3)}
    sampler.measure(out, w0, time.time())
    return out


def naive_batches(ds: H5PerSample, batch: int, workers: int, device: Any) -> Any:
    import torch

    cuda = device.type == "cuda"
    dl: Any = torch.utils.data.DataLoader(  # a map-style dataset: __len__ and __getitem__
        ds, batch_size=batch, shuffle=True,  # type: ignore[arg-type]
        num_workers=workers, pin_memory=cuda, drop_last=True,
        timeout=300 if workers else 0, persistent_workers=False)
    for x, y in dl:
        yield (x.to(device, non_blocking=cuda),), y.to(device, non_blocking=cuda)


def part_b(model_file: Path, hparams: dict[str, Any], trial: Path, a: argparse.Namespace,
           device: Any, sampler: GpuSampler, deadline: float) -> dict[str, Any]:
    import itertools

    from payloads.runtime import session, threads, torch_fit
    from payloads.runtime.trial import load_trial

    cfg = load_trial(trial)
    plan = threads.plan_threads(cfg.cores, 1)
    procs = session.reader_processes(cfg.training.options.reader_processes, plan,
                                     "GPU" if device.type == "cuda" else "CPU")
    data = session.open_data(cfg, 0, 1, procs, session.gather_threads(plan))
    head = data.train.src.head(20000)
    trainer = Trainer(cfg.model_file, cfg.hparams, head, device, cfg.training.mixed_precision)
    steps = data.train.steps_per_epoch - a.warmup
    out: dict[str, Any] = {"n_params": trainer.n_params, "precision": trainer.precision,
                           "reader_processes": procs, "gather_threads": session.gather_threads(plan)}
    stream = torch_fit.batches(data.train, [0, 1], device)
    try:
        pairs = ((x, y) for x, y, _w in stream)  # (features, labels, weights: None here)
        out["gridml"] = timed(trainer, pairs, a.warmup, steps, left(deadline, a.seconds_b),
                              sampler)
        x, y, _w = next(stream)
        one = (tuple(t.clone() for t in x), y.clone())  # slab buffers are recycled
    finally:
        stream.close()
        for ld in data.loaders:
            ld.close()
        for s in data.sources:
            s.close()
    out["memory"] = timed(trainer, itertools.repeat(one), a.warmup, out["gridml"]["steps"] or 1,
                          left(deadline, a.seconds_b), sampler)
    if left(deadline, a.seconds_naive) < 0.5 * a.seconds_naive:
        out["naive"] = {"error": "skipped: --budget-s spent"}
        return out
    it = naive_batches(H5PerSample(list(cfg.data.train)), cfg.training.batch_size,
                       a.naive_workers, device)
    try:
        out["naive"] = timed(trainer, it, 2, 10**9, left(deadline, a.seconds_naive), sampler)
    finally:
        it.close()  # the DataLoader's workers go
    return out


def left(deadline: float, want: float) -> float:
    return max(1.0, min(want, deadline - time.monotonic()))


# ---- report ------------------------------------------------------------------------------------------
def machine(cuda: bool) -> dict[str, Any]:
    import h5py
    import numpy as np
    import torch

    gpus = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())] if cuda else []
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:
        cores = os.cpu_count() or 1
    return {"gpus": gpus, "torch": torch.__version__, "cuda": torch.version.cuda,
            "cudnn": torch.backends.cudnn.version() if cuda else None, "numpy": np.__version__,
            "h5py": h5py.__version__, "python": sys.version.split()[0], "cores": cores,
            "cpu_count": os.cpu_count(), "platform": platform.platform(),
            "load_avg_start": round(os.getloadavg()[0], 2)}


def fmt(v: Any, pct: bool = False) -> str:
    if v is None:
        return "-"
    return f"{100 * v:.1f}%" if pct else f"{v:,.0f}"


def gpu_cell(g: dict[str, Any] | None, cuda: bool, kind: str | None) -> str:
    if not cuda:
        return "n/a (no GPU)"
    if kind is None:
        return "n/a (no nvidia-smi/NVML)"
    if not g:
        return "no samples"
    return f"{g['util_mean']:.0f}% (max {g['util_max']:.0f}%), {g['mem_max_mib']:,.0f} MiB"


def print_report(res: dict[str, Any]) -> None:
    m, cfg, cuda, kind = res["machine"], res["config"], res["cuda"], res["gpu_sampler"]
    gpu = ", ".join(m["gpus"]) or "none (CPU run)"
    print(f"\nmachine: GPU {gpu}; torch {m['torch']} (CUDA {m['cuda']}), numpy {m['numpy']}, "
          f"h5py {m['h5py']}, Python {m['python']}, {m['cores']} cores, {m['platform']}, "
          f"load average {m['load_avg_start']} at start, {res.get('load_avg_end', '-')} at end")
    print(f"data: {cfg['rows']:,} training rows ({cfg['val_rows']:,} validation) x 10 float32 in "
          f"{cfg['files']} files, chunks of {cfg['chunk_rows']} rows, {cfg['compression']}; "
          f"batch {cfg['batch']} per rank, {cfg['epochs']} epochs, mixed_precision "
          f"{cfg['mixed_precision']}, {cfg['ranks']} rank(s) on {res['device']}")
    print("\nPart A: the torch payload end to end (torchrun -m payloads.train_torch; per-epoch "
          "reports)\n\n| model | params | epoch 1 samples/s | later epochs samples/s "
          "| input wait (epoch 1 / later) | s per epoch (later) | GPU util, peak memory "
          "| payload wall |\n|---|---|---|---|---|---|---|---|")
    for name, r in res["part_a"].items():
        if r.get("error"):
            print(f"| {name} | - | failed: {r['error']} | | | | | {r.get('wall_s', '-')} s |")
            continue
        e1, later = r["epoch1"], r["later"] or {}
        g = gpu_cell(r["gpu"], cuda, kind) + (f" ({r['gpu_window']})" if cuda else "")
        print(f"| {name} | {fmt(r['n_params'])} | {fmt(e1['samples_per_s'])} "
              f"| {fmt(later.get('samples_per_s'))} | {fmt(e1['input_wait_frac'], True)} / "
              f"{fmt(later.get('input_wait_frac'), True)} | "
              f"{later.get('epoch_time') or e1['epoch_time'] or 0:.2f} | {g} | {r['wall_s']:.1f} s |")
    print("\nPart B: one plain training loop, three feeds, side by side in this process\n\n"
          "| model | feed | samples/s | input wait | GPU util, peak memory | steps timed "
          "| vs naive |\n|---|---|---|---|---|---|---|")
    labels = {"gridml": "gridml loader (torch_fit.batches, 1st epoch)",
              "memory": "one batch on the device (compute only)",
              "naive": f"naive Dataset per-sample h5py, DataLoader {cfg['naive_workers']} workers"}
    for name, r in res["part_b"].items():
        if r.get("error"):
            print(f"| {name} | - | failed: {r['error']} | | | | |")
            continue
        naive = (r.get("naive") or {}).get("samples_per_s")
        for feed in ("gridml", "memory", "naive"):
            f = r.get(feed) or {}
            if f.get("error") or not f:
                print(f"| {name} | {labels[feed]} | {f.get('error', 'not run')} | | | | |")
                continue
            vs = f"{f['samples_per_s'] / naive:,.1f}x" if naive and f.get("samples_per_s") else "-"
            print(f"| {name} | {labels[feed]} | {fmt(f['samples_per_s'])} "
                  f"| {fmt(f['input_wait_frac'], True)} | {gpu_cell(f['gpu'], cuda, kind)} "
                  f"| {f['steps']:,} | {vs} |")


def write_json(path: Path, res: dict[str, Any]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(res, indent=2, default=str))
    os.replace(tmp, path)


# ---- main ----------------------------------------------------------------------------------------------
def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", type=int, help="training rows (default 1,000,000; --quick 200,000)")
    p.add_argument("--epochs", type=int, help="payload epochs in part A (default 3; --quick 2)")
    p.add_argument("--batch", type=int, default=256, help="batch per rank (quickstart: 256)")
    p.add_argument("--quick", action="store_true",
                   help="a small run (~1-2 min on a 2-core CPU): 200k rows, 2 epochs, a 256x2 "
                        "wide model, part B feeds capped at 10 s, 5 s naive")
    p.add_argument("--seconds-naive", type=float, help="naive feed time (default 30; --quick 5)")
    p.add_argument("--seconds-b", type=float,
                   help="cap on the gridml and in-memory feeds' time in part B (default 60; "
                        "--quick 10)")
    p.add_argument("--naive-workers", type=int, default=4)
    p.add_argument("--warmup", type=int, default=20, help="untimed steps before each part B feed")
    p.add_argument("--files", type=int, default=4)
    p.add_argument("--chunk-rows", type=int, default=4096, help="HDF5 chunk rows (sample data: 4096)")
    p.add_argument("--compression", choices=["gzip", "lzf", "none"], default="gzip")
    p.add_argument("--mixed-precision", choices=["false", "fp16", "bf16"], default="false")
    p.add_argument("--wide-units", type=int, help="default 1024; --quick 256")
    p.add_argument("--wide-layers", type=int, help="default 4; --quick 2")
    p.add_argument("--models", default="quickstart,wide", help="comma list: quickstart, wide")
    p.add_argument("--parts", default="a,b", help="comma list: a (payload), b (feeds)")
    p.add_argument("--reader-processes", default="auto",
                   help="training.options.reader_processes: auto (the payload's default: the "
                        "rank's spare cores, at most 4, on a GPU; 0 on a CPU) or a number")
    p.add_argument("--ranks", type=int, help="part A ranks (default: the GPUs, 1 on a CPU)")
    p.add_argument("--cpu", action="store_true", help="stay on the CPU even with a GPU")
    p.add_argument("--defer", default="",
                   help="part A again for each of these comma-separated counts of batches the "
                        "payload's metrics count at once on a GPU (payloads.runtime.torch_model."
                        "DEFER, 16; 1 counts each batch as it comes), in this order per model, "
                        "e.g. 16,1,16,1 to interleave; default: one run with the payload's own")
    p.add_argument("--timeout-a", type=float, default=420, help="time limit of one payload run (s)")
    p.add_argument("--budget-s", type=float, default=560,
                   help="the whole run's time (s); pieces that no longer fit are skipped")
    p.add_argument("--out", type=Path, help="JSON file (default $OUT/torch_gpu.json, else ./)")
    p.add_argument("--workdir", type=Path, help="keep data and trials here (default: a temp dir, removed)")
    a = p.parse_args(argv)
    q = a.quick
    for name, full, quick in (("rows", 1_000_000, 200_000), ("epochs", 3, 2),
                              ("seconds_naive", 30.0, 5.0), ("seconds_b", 60.0, 10.0),
                              ("wide_units", 1024, 256), ("wide_layers", 4, 2)):
        if getattr(a, name) is None:
            setattr(a, name, quick if q else full)
    if a.reader_processes != "auto":
        if not a.reader_processes.isdigit():
            p.error("--reader-processes: auto or a number")
        a.reader_processes = int(a.reader_processes)
    a.models = [m.strip() for m in a.models.split(",") if m.strip()]
    try:
        a.defer = [int(x) for x in a.defer.split(",") if x.strip()] or [None]
    except ValueError:
        p.error("--defer: comma-separated whole numbers, e.g. 16,1")
    if any(d is not None and d < 1 for d in a.defer):
        p.error("--defer: counts of 1 or more")
    a.parts = [x.strip().lower() for x in a.parts.split(",") if x.strip()]
    bad = [m for m in a.models if m not in ("quickstart", "wide")]
    if bad or not set(a.parts) <= {"a", "b"}:
        p.error(f"unknown model or part: {bad or a.parts}")
    if a.out is None:
        a.out = Path(os.environ["OUT"]) / "torch_gpu.json" if os.environ.get("OUT") \
            else Path.cwd() / "torch_gpu.json"
    return a


def main(argv: list[str] | None = None) -> int:
    a = parse(argv)
    try:
        check_requirements()
    except Missing as e:
        print(f"torch_gpu.py: {e}", file=sys.stderr)
        return 2
    start = time.monotonic()
    deadline = start + a.budget_s

    def on_term(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, on_term)
    warnings.filterwarnings("ignore", message="This DataLoader will create")  # workers > cores
    from payloads.runtime import threads

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    plan = threads.plan_threads(cores, 1)  # part B's process sized as a one-rank payload
    threads.apply_env(plan)
    import torch

    threads.apply_torch(plan)
    cuda = torch.cuda.is_available() and not a.cpu
    device = torch.device("cuda", 0) if cuda else torch.device("cpu")
    ranks = a.ranks or (torch.cuda.device_count() if cuda else 1)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    logs = a.out.with_name(a.out.stem + "_logs")
    logs.mkdir(exist_ok=True)
    work = a.workdir or Path(tempfile.mkdtemp(prefix="gridml-torch-gpu-"))
    work.mkdir(parents=True, exist_ok=True)
    sampler = GpuSampler(logs, a.budget_s, cuda)
    val_rows = max(a.rows // 10, a.batch * ranks)
    res: dict[str, Any] = {
        "benchmark": "benchmarks/torch_gpu.py", "argv": sys.argv[1:], "cuda": cuda,
        "device": str(device), "machine": machine(cuda),
        "config": {"rows": a.rows, "val_rows": val_rows, "files": a.files,
                   "chunk_rows": a.chunk_rows, "compression": a.compression, "batch": a.batch,
                   "epochs": a.epochs, "mixed_precision": a.mixed_precision, "ranks": ranks,
                   "naive_workers": a.naive_workers, "reader_processes": a.reader_processes,
                   "defer": a.defer,
                   "seconds_naive": a.seconds_naive,
                   "seconds_b": a.seconds_b, "warmup": a.warmup, "cores": cores,
                   "wide": {"units": a.wide_units, "layers": a.wide_layers}},
        "gpu_sampler": None, "part_a": {}, "part_b": {}}
    print(f"torch_gpu: device {device}, {ranks} rank(s), {cores} cores; writing {a.out}",
          flush=True)
    try:
        sampler.start()
        res["gpu_sampler"] = sampler.kind
        t = time.monotonic()
        data = work / "data"
        data.mkdir(exist_ok=True)
        train = write_split(data, "train", a.rows, a.files, a.chunk_rows, a.compression, 1)
        val = write_split(data, "val", val_rows, max(1, a.files // 2), a.chunk_rows,
                          a.compression, 2)
        res["config"]["data_write_s"] = round(time.monotonic() - t, 1)
        res["config"]["data_mb"] = round(sum(p.stat().st_size for p in train + val) / 1e6, 1)
        print(f"data: {a.rows:,} + {val_rows:,} rows written in {res['config']['data_write_s']} s "
              f"({res['config']['data_mb']} MB)", flush=True)
        wide = work / "wide_mlp.py"
        wide.write_text(WIDE_MODEL)
        models = {"quickstart": (QUICKSTART_MODEL, QUICKSTART_HPARAMS),
                  "wide": (wide, {"learning_rate": 1e-3, "units": a.wide_units,
                                  "layers": a.wide_layers})}
        trials = {name: make_trial(work / f"trial-{name}", name, *models[name], train, val, a,
                                   ranks, cuda, cores) for name in a.models}
        res["trials"] = {n: json.loads(p.read_text()) for n, p in trials.items()}
        write_json(a.out, res)
        if "a" in a.parts:
            runs = [(name, trial, d, i) for name, trial in trials.items()
                    for i, d in enumerate(a.defer)]
            for name, trial, defer, i in runs:
                key = name if a.defer == [None] else f"{name} defer={defer} #{i + 1}"
                budget = deadline - time.monotonic()
                if budget < 30:
                    res["part_a"][key] = {"error": "skipped: --budget-s spent"}
                    continue
                print(f"part A, {key}: the payload ...", flush=True)
                # a run of its own: the payload would go on from the last run's checkpoint
                shutil.rmtree(trial.parent / "outputs", ignore_errors=True)
                log = logs / f"payload-{name}{'' if defer is None else f'-defer{defer}-{i + 1}'}.log"
                run = run_payload(trial, ranks, min(a.timeout_a, budget), log, defer)
                reports = read_reports(trial.parent / "outputs")
                r = {"rc": run["rc"], "wall_s": run["wall_s"], "error": run["error"],
                     "reports": reports}
                if reports:
                    r.update(part_a_summary(run, reports, sampler))
                    sampler.measure(r, *r.pop("gpu_span"))
                elif not run["error"]:
                    r["error"] = "no epoch reports in metrics.jsonl"
                if run["error"]:
                    r["log_tail"] = run["log_tail"]
                    print("\n".join(run["log_tail"][-15:]), file=sys.stderr)
                r["defer"] = defer
                res["part_a"][key] = r
                write_json(a.out, res)
        if "b" in a.parts:
            for name, trial in trials.items():
                if deadline - time.monotonic() < 20:
                    res["part_b"][name] = {"error": "skipped: --budget-s spent"}
                    continue
                print(f"part B, {name}: gridml loader, in-memory batch, naive DataLoader ...",
                      flush=True)
                try:
                    res["part_b"][name] = part_b(*models[name], trial, a, device, sampler,
                                                 deadline)
                except Exception as e:  # one model's failure leaves the others' figures
                    import traceback

                    traceback.print_exc()
                    res["part_b"][name] = {"error": f"{type(e).__name__}: {str(e)[:300]}"}
                write_json(a.out, res)
    except KeyboardInterrupt as e:
        res["interrupted"] = str(e) or "interrupted"
        print(f"torch_gpu: interrupted ({res['interrupted']}); figures so far in {a.out}",
              file=sys.stderr)
    finally:
        sampler.stop()
        res["load_avg_end"] = round(os.getloadavg()[0], 2)
        res["wall_s"] = round(time.monotonic() - start, 1)
        write_json(a.out, res)
        if a.workdir is None:
            shutil.rmtree(work, ignore_errors=True)
    print_report(res)
    print(f"\nall figures: {a.out} (payload logs in {logs}); {res['wall_s']} s in all")
    return 130 if res.get("interrupted") else 0


if __name__ == "__main__":
    raise SystemExit(main())
