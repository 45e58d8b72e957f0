"""One PyTorch trial on this rank (under torchrun): process group, device, the data pipeline the
Keras payload uses, DistributedDataParallel, the epoch loop with AMP, metrics summed over ranks,
rank 0's report/checkpoint/should-stop, resume, and the outputs (model.pt, model.onnx).

Imports torch, numpy, h5py and the payload runtime; never TensorFlow or Horovod.
"""

from __future__ import annotations

import datetime
import logging
import os
import platform
import socket
import sys
import time
from contextlib import nullcontext
from pathlib import Path
from typing import Any
from collections.abc import Generator, Iterator

import numpy as np
import torch
import torch.distributed as dist

from payloads.runtime import costs, gpu, outputs, preempt, profile, threads, torch_model
from payloads.runtime.core import (SplitEvaluation, TrialCore, ValidationFigures, metric_hook,
                                   run_guarded, test_figures, weight_factors)
from payloads.runtime.checkpoint import EXTRA, Checkpointer, _pickle
from payloads.runtime.errors import CONTINUE_CODE
from payloads.runtime.session import (Data, _input_shape, gather_threads, make_reporter, open_data,
                                      reader_processes)
from payloads.runtime.trial import TrialDoc

log = logging.getLogger("gridml.payload")


# ---- the process group and the device ----------------------------------------------------------
def backend_for(device_type: str, local_ranks: int, gpus: int) -> tuple[str, str | None]:
    """The process group's backend, and a line for the log when it is not the obvious one.
    NCCL needs a GPU of its own per rank (two ranks on one GPU fail with "Duplicate GPU
    detected"): where this node runs more ranks than it has GPUs (``training.workers`` above
    ``resources.gpus``), the ranks share the GPUs and talk through Gloo, which reduces CUDA
    tensors by way of the host; the result is the same, only slower."""
    if device_type != "cuda":
        return "gloo", None
    if local_ranks <= gpus:
        return "nccl", None
    return "gloo", (f"{local_ranks} ranks on this node share {gpus} GPU(s): the process group is "
                    f"gloo, since NCCL needs a GPU per rank (give each rank one: resources.gpus "
                    f">= training.workers per node)")


class Dist:
    """This rank in the job: torch.distributed when launched by torchrun, else a single rank."""

    def __init__(self, device_type: str) -> None:
        self.rank = int(os.environ.get("RANK", 0))
        self.size = int(os.environ.get("WORLD_SIZE", 1))
        self.local_rank = int(os.environ.get("LOCAL_RANK", 0))
        self.on = "MASTER_ADDR" in os.environ and self.size >= 1
        self.backend: str | None = None
        if self.on:
            gpus = torch.cuda.device_count() if device_type == "cuda" else 0
            self.backend, note = backend_for(
                device_type, int(os.environ.get("LOCAL_WORLD_SIZE", self.size)), gpus)
            if note and self.rank == 0:
                log.warning(note)
            dist.init_process_group(self.backend, timeout=datetime.timedelta(seconds=300))

    def all_reduce(self, t: torch.Tensor) -> Any:
        return dist.all_reduce(t) if self.on and self.size > 1 else None

    def any(self, flag: bool, device: torch.device) -> bool:
        """Whether ``flag`` is set on any rank (an all-reduce MAX of one number)."""
        if not self.on or self.size == 1:
            return flag
        t = torch.tensor([1.0 if flag else 0.0], device=device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return bool(t.item() > 0)

    def gather(self, obj: Any) -> list[Any]:
        if not self.on or self.size == 1:
            return [obj]
        out: list[Any] = [None] * self.size
        dist.all_gather_object(out, obj)
        return out

    def broadcast(self, obj: Any) -> Any:
        if not self.on or self.size == 1:
            return obj
        box = [obj]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def close(self) -> None:
        if self.on and dist.is_initialized():
            dist.destroy_process_group()


def choose_device(wanted: int, local_rank: int) -> torch.device:
    """One GPU per local rank when the trial asked for GPUs and the node has them, else CPU."""
    n = torch.cuda.device_count() if wanted > 0 and torch.cuda.is_available() else 0
    index = gpu.choose_gpu(local_rank, n)
    if index is None:
        return torch.device("cpu")
    torch.cuda.set_device(index)
    return torch.device("cuda", index)


def precision(option: Any, device: torch.device) -> tuple[torch.dtype | None, bool, str]:
    """(autocast dtype or None, use a GradScaler, name) for ``training.mixed_precision``:
    ``true``/fp16 is float16 autocast with a GradScaler on a GPU and float32 on a CPU (with a
    log line, as for Keras); bf16 is bfloat16 autocast (no scaler) on both."""
    kind = gpu.effective_precision(option, device.type == "cuda")
    if kind == "bf16":
        return torch.bfloat16, False, "bfloat16"
    if kind == "fp16":
        return torch.float16, True, "float16"
    return None, False, "float32"


# ---- checkpoints -------------------------------------------------------------------------------
class TorchCheckpointer(Checkpointer):
    """The Keras payload's layout (epoch-N/ or step-N-B/ renamed into place, state.json
    replaced atomically) holding ``state.pt``: model, optimizer and AMP scaler state; a
    mid-epoch one also ``extra.pkl`` (every rank's RNG states and running metric sums)."""

    @staticmethod
    def _write(folder: Path, model: Any, epoch: int, optimizer: Any, scaler: Any) -> None:
        torch.save({"model": model.state_dict(), "epoch": epoch,
                    "optimizer": optimizer.state_dict() if optimizer is not None else None,
                    "scaler": scaler.state_dict() if scaler is not None else None},
                   folder / "state.pt")

    def save(self, model: Any, epoch: int, extra: dict[str, Any] | None = None,  # type: ignore[override]
             optimizer: Any = None, scaler: Any = None) -> Path:
        return self.commit(f"epoch-{epoch}",
                           lambda d: self._write(d, model, epoch, optimizer, scaler),
                           {"epoch": epoch, "framework": "torch", **(extra or {})})

    def save_step(self, model: Any, epoch: int, batch: int, extra: dict[str, Any],  # type: ignore[override]
                  optimizer: Any = None, scaler: Any = None) -> Path:
        """Mid-epoch (``epoch`` epochs completed, ``batch`` batches of the next trained)."""
        def write(d: Path) -> None:
            self._write(d, model, epoch, optimizer, scaler)
            _pickle(d / EXTRA, extra)

        return self.commit(f"step-{epoch + 1}-{batch}", write,
                           {"epoch": epoch, "batch": batch, "kind": "step", "framework": "torch"})

    def restore(self, model: Any, optimizer: Any = None, scaler: Any = None) -> int:  # type: ignore[override]
        state = self.state()
        if state is None:
            return 0
        blob = torch.load(self.dir / state["name"] / "state.pt", map_location="cpu",
                          weights_only=False)
        model.load_state_dict(blob["model"])
        if optimizer is not None and blob.get("optimizer"):
            optimizer.load_state_dict(blob["optimizer"])
        if scaler is not None and blob.get("scaler"):
            scaler.load_state_dict(blob["scaler"])
        return int(state["epoch"])


# ---- batches -----------------------------------------------------------------------------------
def _tensor(a: np.ndarray, device: torch.device) -> torch.Tensor:
    """No copy on a CPU (``from_numpy`` shares the slab); on a GPU an asynchronous transfer of
    the whole slab (from pinned memory when the slab is in it: ``_pinned``)."""
    t = torch.from_numpy(a)
    if device.type == "cuda":
        if not t.is_pinned():
            t = t.pin_memory()
        return t.to(device, non_blocking=True)
    return t


def _pinned(shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    """A slab buffer in page-locked memory (the loader gathers rows straight into it, so the
    transfer to the GPU needs no staging copy); plain memory where pinning is refused."""
    try:
        return torch.empty(shape, dtype=torch.from_numpy(np.empty(0, dtype)).dtype,
                           pin_memory=True).numpy()
    except (RuntimeError, TypeError):
        return np.empty(shape, dtype)


def batches(loader: Any, epochs: Any, device: torch.device,
            skip: int = 0) -> Generator[tuple[Any, torch.Tensor, Any], None, None]:
    """(features, labels, weights or None) batches as tensors: each slab crosses to torch once, batches are views
    (``unbind``: all of a slab's batch views in one call). The loader gathers rows into recycled
    buffers (``reuse``): a batch is used by one step before the next is asked for; on a GPU the
    slab's transfer is waited for before its buffer can return to the loader. ``skip``: the
    first epoch's first batches, already trained (resumed mid-epoch), are left out."""
    names = [*loader.features, loader.labels, *([loader.weights] if loader.weights else [])]
    cuda = device.type == "cuda"
    done: Any = None
    for slab in loader.slabs(epochs, reuse=True, alloc=_pinned if cuda else None, skip=skip):
        if done is not None:  # the previous slab's copy finished: its buffer may be refilled
            done.synchronize()
        ts = {n: _tensor(slab[n], device) for n in names}
        if cuda:
            done = torch.cuda.Event()
            done.record()
        feats = [ts[f].unbind(0) for f in loader.features]
        ws = ts[loader.weights].unbind(0) if loader.weights else None
        for i, y in enumerate(ts[loader.labels].unbind(0)):
            yield tuple(f[i] for f in feats), y, (ws[i] if ws is not None else None)


def forward(model: Any, x: tuple[torch.Tensor, ...]) -> torch.Tensor:
    """One feature: ``model(x)``; several: ``model(*features)`` in data.features order (with
    data.inputs: each collection followed by its mask, e.g. ``model(jets, tracks,
    tracks_mask)``)."""
    return model(*x)


# ---- one trial ---------------------------------------------------------------------------------
class Trainer:
    def __init__(self, cfg: TrialDoc, plan: threads.ThreadPlan, data: Data, ranks: Dist,
                 device: torch.device) -> None:
        self.cfg, self.plan, self.data, self.ranks, self.device = cfg, plan, data, ranks, device
        t = cfg.training
        self.amp_dtype, use_scaler, self.precision = precision(t.mixed_precision, device)
        self.user = torch_model.load(cfg.model_file)
        self.input_shape = _input_shape(data.train, list(data.train.features))
        torch.manual_seed(cfg.seed % 2**31)  # the same initial weights on every rank
        self.model = torch_model.build(self.user, cfg.model_file, cfg.hparams, self.input_shape)
        self._adapt()
        self.model.to(device)
        self.costs = self._costs() if ranks.rank == 0 else {}  # in every epoch's metrics
        lr = cfg.learning_rate * (ranks.size if t.options.lr_scaling == "linear" else 1)
        self.lr = lr
        self.opt = torch_model.optimizer(t.optimizer, self.model.parameters(), lr, cfg.hparams)
        self.scaler = torch.amp.GradScaler(device.type, enabled=use_scaler)
        self.loss_fn = self.user.loss or torch_model.loss_fn(t.loss)
        self.event_loss = self.user.loss or torch_model.event_loss_fn(t.loss)
        hook, hook_names, self.metric_names = metric_hook(cfg, self.user.module,
                                                          torch_model.METRICS)
        m = torch_model.Metrics(self.metric_names, t.loss, device)  # unknown names fail now
        self.figures = (ValidationFigures(cfg, "logit" if m.logits else "probability", hook,
                                          hook_names)
                        if data.val is not None and (m.logits or hook is not None) else None)
        self.test_figures = (test_figures(cfg, "logit" if m.logits else "probability", hook,
                                          hook_names)
                             if data.test is not None and (m.logits or hook is not None) else None)
        self.class_w, self.w_scale = self._weighting()
        self.ckpt = ckpt = TorchCheckpointer(cfg.output_dir / "checkpoint")
        self.core = TrialCore(
            cfg, ranks.rank, make_reporter(cfg) if ranks.rank == 0 else None, ranks.broadcast,
            restore=lambda: ckpt.restore(self.model, self.opt, self.scaler),
            save=lambda epoch: ckpt.save(self.model, epoch, optimizer=self.opt, scaler=self.scaler),
            costs=self.costs, figures=self.figures, checkpointer=ckpt)
        self.start = self.core.resume()
        # the warning before the job ends (SIGUSR1): every rank agrees after each batch (on a
        # GPU every 10th: the check is a host sync), payloads/runtime/preempt.py
        self.watch = preempt.Watch(lambda flag: ranks.any(flag, device),
                                   every=10 if device.type == "cuda" else 1)
        self._resumed_rank: dict[str, Any] = {}  # this rank's part of a mid-epoch checkpoint
        self.ddp = self._wrap()
        self.last_profile: dict[str, Any] = {}

    def _weighting(self) -> tuple[torch.Tensor | None, float]:
        """(class factors on the device or None, the weights' scale): see core.weight_factors."""
        cfg, src = self.cfg, self.data.train.src
        if not cfg.data.weights and cfg.training.class_weights in (None, "", {}):
            return None, 1.0
        y = np.concatenate([f[cfg.data.labels][:] for f in src.files])
        w = (np.concatenate([f[cfg.data.weights][:] for f in src.files])
             if cfg.data.weights else None)
        k = y.shape[1] if y.ndim == 2 and y.shape[1] > 1 else (
            int(y.max()) + 1 if "sparse" in cfg.training.loss.lower() else 2)
        cw, scale = weight_factors(cfg, y, w, k)
        if cw is not None:
            log.info("class weights: %s", ", ".join(f"{i}: {v:.4g}" for i, v in enumerate(cw)))
        return (torch.as_tensor(cw, dtype=torch.float32, device=self.device)
                if cw is not None else None), scale

    def _train_weights(self, y: torch.Tensor, w: torch.Tensor | None) -> torch.Tensor | None:
        """A batch's training weights: event weight x class factor x scale (None: unweighted)."""
        if w is None and self.class_w is None:
            return None
        out = (w.float().reshape(-1) if w is not None
               else torch.ones(y.shape[0], device=y.device)) * self.w_scale
        if self.class_w is not None:
            cls = (y.reshape(y.shape[0], -1).argmax(-1) if y.ndim == 2 and y.shape[1] > 1
                   else (y.reshape(-1) > 0.5).long() if len(self.class_w) == 2
                   else y.reshape(-1).long())
            out = out * self.class_w[cls.clamp(0, len(self.class_w) - 1)]
        return out

    def _adapt(self) -> None:
        """``model.adapt(samples)`` when the model defines it: the first ``adapt_samples``
        training rows per feature (None for a ragged one), the same rows on every rank."""
        fn = getattr(self.model, "adapt", None)
        if callable(fn):
            feats = list(self.data.train.features)
            head = self.data.train.src.head(self.cfg.training.options.adapt_samples)
            fn([head.get(f) for f in feats])
            log.info("adapted the model on the first %d training rows",
                     len(head[self.data.train.labels]))

    def _costs(self) -> dict[str, float]:
        """The cost metrics (payloads/runtime/costs.py) of the model just built."""
        feats = list(self.data.train.features)
        rows = costs.sample(self.data.train.src.head(costs.BATCH), feats)
        measured = costs.torch_costs(self.model, rows, self.device)
        log.info("model costs: %s", ", ".join(f"{k}={v:.4g}" for k, v in measured.items()))
        return measured

    def _wrap(self) -> Any:
        if not (self.ranks.on and self.ranks.size > 1):
            return self.model
        from torch.nn.parallel import DistributedDataParallel as DDP

        ddp = DDP(self.model, device_ids=[self.device.index] if self.device.type == "cuda" else None)
        if self.cfg.training.options.gradient_compression == "fp16":  # half the all-reduce bytes
            from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

            ddp.register_comm_hook(None, default_hooks.fp16_compress_hook)
        return ddp

    def _autocast(self) -> Any:
        if self.amp_dtype is None:
            return nullcontext()
        return torch.autocast(device_type=self.device.type, dtype=self.amp_dtype)

    def _step(self, x: tuple[torch.Tensor, ...], y: torch.Tensor, w: torch.Tensor | None,
              metrics: torch_model.Metrics) -> None:
        self.opt.zero_grad(set_to_none=True)
        tw = self._train_weights(y, w)
        with self._autocast():
            if self.user.training_step is not None:
                batch = (x[0] if len(x) == 1 else x, y) + ((tw,) if tw is not None else ())
                r = self.user.training_step(self.ddp, batch, self.loss_fn)
                loss, out = r if isinstance(r, tuple) else (r, None)
            elif tw is not None:
                out = forward(self.ddp, x)
                loss = torch_model.weighted(self.event_loss(out, y), tw,
                                            "the model file's loss" if self.user.loss else "loss")
            else:
                out = forward(self.ddp, x)
                loss = self.loss_fn(out, y)
        self.scaler.scale(loss).backward()
        self.scaler.step(self.opt)
        self.scaler.update()
        metrics.update(loss, out, y)

    @torch.no_grad()
    def validate(self) -> dict[str, float]:
        """The validation pass: the metrics (weighted by the event weights), then the figures
        of merit from every rank's score histograms (summed by one all-reduce) and the metric
        hook on every rank's scores (gathered; rank 0 calls it)."""
        self.model.eval()
        m = torch_model.Metrics(self.metric_names, self.cfg.training.loss, self.device)
        keep: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]] = []
        for x, y, w in batches(self.data.val, [0], self.device):
            with self._autocast():
                out = forward(self.model, x)
                if w is not None:
                    ev = self.event_loss(out, y)
                    loss = torch_model.weighted(ev, w, "loss") / w.float().mean()
                else:
                    loss = self.loss_fn(out, y)
                m.update(loss, out, y, w)
            if self.figures is not None:  # copies (the batch's buffers are recycled), kept
                # on the device: one transfer after the pass, no sync per batch on a GPU
                keep.append((out.detach().float().clone(), y.detach().clone(),
                             w.detach().clone() if w is not None else None))
        self.model.train()
        logs = m.reduce(self.ranks.all_reduce)
        if self.figures is not None:
            logs.update(self._figures(keep))
        return logs

    def _figures(self, keep: list[tuple[torch.Tensor, torch.Tensor, Any]]) -> dict[str, float]:
        """val_ figures of merit and hook metrics (names already prefixed, merged below)."""
        fig = self.figures
        assert fig is not None
        if keep:
            s = torch.cat([k[0] for k in keep]).cpu().numpy()
            y = torch.cat([k[1] for k in keep]).cpu().numpy()
            w = (torch.cat([k[2] for k in keep]).cpu().numpy() if keep[0][2] is not None
                 else np.ones(len(y)))
        else:
            s, y, w = np.zeros((0, 1), np.float32), np.zeros((0,)), np.zeros((0,))
        # one all-reduce of the (classes, bins) histograms, on the device (nccl takes no CPU
        # tensors)
        dev = torch.from_numpy(fig.histograms(s, y, w)).to(self.device)
        self.ranks.all_reduce(dev)
        hist = dev.cpu().numpy()
        gathered = self.ranks.gather((y, s, w)) if fig.hook is not None else None
        if self.ranks.rank != 0:
            fig.hist = hist
            return {}
        return {k.removeprefix("val_"): v for k, v in fig.metrics(hist, gathered).items()}

    def fit(self) -> None:
        cfg, data = self.cfg, self.data
        epochs, steps = cfg.training.epochs, data.train.steps_per_epoch
        if data.val is not None and data.val.steps_per_epoch == 0:
            log.warning("data.validation has fewer rows than ranks: no validation metrics")
            data.val = None
        if self.start >= epochs:
            return
        skip = self.core.resume_batch
        if skip:
            self._restore_step(self.core.resume_extra)
        stream = batches(data.train, range(self.start, epochs), self.device, skip=skip)
        try:
            for epoch in range(self.start, epochs):
                if not self._epoch(epoch, stream, steps, skip if epoch == self.start else 0):
                    break
        finally:
            stream.close()  # stops the reader threads (also after a stop or an error)

    # ---- a checkpoint in the middle of an epoch (on a signal: payloads/runtime/preempt.py) ----
    def _rank_state(self, m: torch_model.Metrics, elapsed: float) -> dict[str, Any]:
        """What this rank needs to go on exactly where it stopped: its RNG states, its running
        metric sums, the epoch's time so far."""
        import random

        m.flush()
        return {"torch": torch.get_rng_state(), "numpy": np.random.get_state(),
                "python": random.getstate(),
                "cuda": torch.cuda.get_rng_state(self.device) if self.device.type == "cuda" else None,
                "sums": m.sums.detach().cpu().clone(), "hist": m.hist.detach().cpu().clone(),
                "elapsed": elapsed}

    def _restore_step(self, extra: dict[str, Any]) -> None:
        import random

        ranks = extra.get("ranks") or []
        if len(ranks) != self.ranks.size:
            log.warning("the mid-epoch checkpoint holds %d ranks' states, this run has %d: the "
                        "RNG and the epoch's running metrics start afresh", len(ranks), self.ranks.size)
            return
        mine = ranks[self.ranks.rank]
        torch.set_rng_state(mine["torch"])
        np.random.set_state(mine["numpy"])
        random.setstate(mine["python"])
        if mine.get("cuda") is not None and self.device.type == "cuda":
            torch.cuda.set_rng_state(mine["cuda"], self.device)
        self._resumed_rank = mine

    def _continue_later(self, epoch: int, batch: int, m: torch_model.Metrics,
                        elapsed: float) -> None:
        """Every rank: the states of all ranks to rank 0, which checkpoints; then leave."""
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        states = self.ranks.gather(self._rank_state(m, elapsed))
        asked = preempt.asked_at()
        extra = {"ranks": states, "signal_wall": time.time() - (
            time.monotonic() - asked if asked is not None else 0.0)}
        self.core.continue_later(epoch, batch, lambda: self.ckpt.save_step(
            self.model, epoch, batch, extra, optimizer=self.opt, scaler=self.scaler))

    def _wait(self) -> float:
        return sum(ld.wait_s for ld in self.data.loaders)

    def _epoch(self, epoch: int, stream: Iterator[Any], steps: int, first: int = 0) -> bool:
        """Epoch ``epoch`` (0-based) from its batch ``first`` (resumed mid-epoch: the RNG and
        running metrics of the checkpoint); False when training stops (early stopping, a
        divergence, or a signal: the trial then leaves to be continued)."""
        t0, cpu0, w0 = time.perf_counter(), time.process_time(), self._wait()
        self.model.train()
        m = torch_model.Metrics(self.metric_names, self.cfg.training.loss, self.device)
        if first and self._resumed_rank:
            mine = self._resumed_rank
            m.sums.copy_(mine["sums"].to(self.device))
            m.hist.copy_(mine["hist"].to(self.device))
            t0 -= float(mine.get("elapsed", 0.0))  # the epoch's time before the signal
        self.core.begin_epoch(epoch + 1, steps)
        for b in range(first, steps):
            x, y, w = next(stream)
            self._step(x, y, w, m)
            self.core.batch_done()  # progress.json (rank 0, every few seconds): stall detection
            if b + 1 < steps and self.watch.due():  # told the job ends soon: all ranks agree
                self._continue_later(epoch, b + 1, m, time.perf_counter() - t0)
                return False
        logs = m.reduce(self.ranks.all_reduce)
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        t_train = time.perf_counter()
        if self.data.val is not None:
            logs.update({f"val_{k}": v for k, v in self.validate().items()})
        now = time.perf_counter()
        mine = profile.rank_profile(now - t0, t_train - t0, self._wait() - w0, 0,
                                    time.process_time() - cpu0)
        per_epoch = self.data.train.rows_per_epoch * self.ranks.size
        self.last_profile = profile.combine(self.ranks.gather(mine), per_epoch)
        return self.core.end_epoch(epoch + 1, logs, self.last_profile, self._extra)

    def _extra(self) -> dict[str, Any]:
        """Rank 0: the report's extra fields of the torch loop."""
        return {"cache": self.data.train.cache.stats(), "device": str(self.device),
                "precision": self.precision}

    def evaluate_test(self) -> None:
        """Every rank, after training: one pass over data.test with the validation code (its
        loss, metrics, figures of merit and hook, over all ranks); rank 0 keeps the result for
        the outputs (core.SplitEvaluation), never as an epoch report."""
        test = self.data.test
        if test is None:
            return
        if test.steps_per_epoch == 0:
            log.warning("data.test has fewer rows than ranks: no test figures")
            return
        val, fig = self.data.val, self.figures
        self.data.val, self.figures = test, self.test_figures
        try:
            logs = self.validate()
        finally:
            self.data.val, self.figures = val, fig
        if self.ranks.rank == 0:
            self.core.test = SplitEvaluation(logs, self.test_figures, test.src.total_rows)

    # ---- rank 0: the outputs -------------------------------------------------------------------
    def finish(self) -> None:
        cfg = self.cfg

        def save(out: Path) -> dict[str, Any]:
            self.model.eval()
            save_model_pt(self.model, out, cfg, self.input_shape)
            feats = list(self.data.train.features)
            varying = [f for f in feats if self.data.train.row_shape(f)[:1] == (None,)]
            return {"onnx": export_onnx(self.model, out / "model.onnx", self._sample_rows(),
                                        feats, varying)}

        self.core.finish(save, lambda: {
            "threads": self.plan.as_dict(), "device": str(self.device),
            "precision": self.precision, "ranks": self.ranks.size, "learning_rate": self.lr,
            "cache": self.data.train.cache.stats()}, versions=versions())

    def _sample_rows(self, n: int = 8) -> tuple[np.ndarray, ...]:
        """A few rows (a batch of the validation data, else of the training data) for the ONNX
        export and its check."""
        loader = self.data.val or self.data.train
        gen = loader.epoch_batches(0)
        try:
            b = next(gen)
        finally:
            gen.close()
        return tuple(np.ascontiguousarray(b[f][:n]) for f in loader.features)


def versions() -> dict[str, Any]:
    import h5py

    return {"framework": "torch", "torch": torch.__version__, "python": sys.version.split()[0],
            "numpy": np.__version__, "h5py": h5py.__version__, "cuda": torch.version.cuda,
            "host": socket.gethostname(), "platform": platform.platform()}


def save_model_pt(model: torch.nn.Module, out: Path, cfg: TrialDoc, input_shape: Any) -> Path:
    """``model.pt``: the state dict and what rebuilds the model (``torch_model.rebuild``, or by
    hand: build_model(hparams, input_shape) from model_source.py, then load_state_dict)."""
    path, tmp = out / "model.pt", out / "model.pt.tmp"
    torch.save({"state_dict": {k: v.detach().cpu() for k, v in model.state_dict().items()},
                "hparams": dict(cfg.hparams), "input_shape": input_shape,
                "model_file": Path(cfg.model_file).name, "model_source": "model_source.py",
                "framework": "torch", "torch_version": torch.__version__,
                "loss": cfg.training.loss, "features": list(cfg.data.features),
                "weights": cfg.data.weights,
                "labels": cfg.data.labels}, tmp)
    os.replace(tmp, path)
    return path


def export_onnx(model: torch.nn.Module, path: Path, sample: tuple[np.ndarray, ...],
                features: list[str], ragged: list[str]) -> dict[str, Any]:
    """``model.onnx`` (batch axis dynamic, and the length axis of ragged features), checked with
    onnxruntime against the model on ``sample``. A model that cannot be exported leaves no
    model.onnx and the reason in provenance; the trial still succeeds."""
    model = model.to("cpu").eval()
    xs = tuple(torch.from_numpy(a) for a in sample)
    axes = {f: ({0: "batch", 1: "length"} if f in ragged else {0: "batch"}) for f in features}
    axes["output"] = {0: "batch"}

    def write(tmp: Path) -> tuple[dict[str, Any], Any]:
        with torch.no_grad():
            expected = model(*xs).float().numpy()
        try:  # the TorchScript exporter: no onnxscript needed, dynamic axes by name
            torch.onnx.export(model, xs, str(tmp), input_names=features, output_names=["output"],
                              dynamic_axes=axes, opset_version=17, dynamo=False)
        except TypeError:  # a PyTorch without the dynamo switch
            torch.onnx.export(model, xs, str(tmp), input_names=features, output_names=["output"],
                              dynamic_axes=axes, opset_version=17)
        return dict(zip(features, sample)), expected

    return outputs.export_onnx(path, write)


def run(cfg: TrialDoc, plan: threads.ThreadPlan) -> int:
    preempt.install()  # SIGUSR1 from now on only asks for a checkpoint (then the pid file)
    pools = threads.apply_torch(plan)
    device = choose_device(cfg.gpus, threads.local_rank())
    ranks = Dist(device.type)
    procs = reader_processes(cfg.training.options.reader_processes, plan,
                             "GPU" if device.type == "cuda" else "CPU")
    if ranks.rank == 0:
        log.info("trial %s/%s: torch %s, %d ranks, device %s, process group %s, threads %s "
                 "(torch %s)", cfg.study, cfg.trial_number, torch.__version__, ranks.size, device,
                 ranks.backend or "none", plan.as_dict(), pools)
    cfg.output_dir.mkdir(parents=True, exist_ok=True)
    data = open_data(cfg, ranks.rank, ranks.size, procs, gather_threads(plan))
    if ranks.rank == 0:  # after open_data, which may drop them (unfiltered data)
        log.info("HDF5 reader processes per rank: %d", data.train.processes)

    def train() -> int:
        trainer = Trainer(cfg, plan, data, ranks, device)
        trainer.fit()
        if trainer.core.continued:  # checkpointed mid-epoch on a signal: continue me
            return CONTINUE_CODE
        trainer.evaluate_test()  # every rank: data.test, once (never an epoch report)
        if ranks.rank == 0:
            trainer.finish()
        return 0

    return run_guarded(data, train, ranks.close)
