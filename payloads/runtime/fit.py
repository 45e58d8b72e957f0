"""One Keras trial on this rank: set up Horovod and the device, open the data, ``model.fit`` with
Horovod's and gridml's callbacks; resuming, reporting, should-stop and the outputs go through the
framework-neutral trial core (payloads/runtime/core.py), given Keras's checkpoint and model files."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from payloads.runtime import callbacks as cbs, costs, gpu, outputs, threads
from payloads.runtime.checkpoint import Checkpointer
from payloads.runtime.core import TrialCore, run_guarded
from payloads.runtime.session import (build_model, gather_threads, make_reporter, open_data,
                                      reader_processes)
from payloads.runtime.trial import TrialDoc

log = logging.getLogger("gridml.payload")


def _costs(cfg: TrialDoc, model: Any, data: Any) -> dict[str, float]:
    """Rank 0: the cost metrics (payloads/runtime/costs.py) of the model just built."""
    feats = list(data.train.features)
    rows = costs.sample(data.train.src.head(costs.BATCH), feats)
    measured = costs.keras_costs(model, rows)
    log.info("model costs: %s", ", ".join(f"{k}={v:.4g}" for k, v in measured.items()))
    return measured


def _callbacks(data: Any, hvd: Any, htf: Any, core: TrialCore) -> list[Any]:
    per_epoch = data.train.rows_per_epoch * hvd.size()
    profiler = cbs.EpochProfiler(data.loaders, htf.allgather_object, lambda: per_epoch)
    report = cbs.EpochReporter(core, profiler, extra=lambda: {"cache": data.train.cache.stats()})
    return [hvd.callbacks.BroadcastGlobalVariablesCallback(0),
            hvd.callbacks.MetricAverageCallback(), profiler, report]


def _datasets(data: Any, plan: threads.ThreadPlan, start: int, epochs: int) -> tuple[Any, Any]:
    """tf.data over the training epochs still to run, and over one validation pass."""
    from payloads.runtime.pipeline.inputs import tf_dataset

    opts = threads.dataset_options(plan)
    if data.val is not None and data.val.steps_per_epoch == 0:
        log.warning("data.validation has fewer rows than ranks: no validation metrics")
        data.val = None
    val_ds = tf_dataset(data.val, None, opts) if data.val is not None else None
    return tf_dataset(data.train, range(start, epochs), opts), val_ds


def fit_and_finish(cfg: TrialDoc, plan: threads.ThreadPlan, data: Any, hvd: Any,
                   device: str, policy: str) -> int:
    import horovod.tensorflow as htf  # the object collectives live here, not in .keras

    model = build_model(cfg, data, hvd)
    model_costs = _costs(cfg, model, data) if hvd.rank() == 0 else {}
    ckpt = Checkpointer(cfg.output_dir / "checkpoint")
    core = TrialCore(cfg, hvd.rank(), make_reporter(cfg) if hvd.rank() == 0 else None,
                     lambda obj: htf.broadcast_object(obj, 0),
                     restore=lambda: ckpt.restore(model),
                     save=lambda epoch: ckpt.save(model, epoch), costs=model_costs)
    start = core.resume()
    epochs = cfg.training.epochs
    train_ds, val_ds = _datasets(data, plan, start, epochs)
    cb = _callbacks(data, hvd, htf, core)
    if start < epochs:
        model.fit(train_ds, epochs=epochs, initial_epoch=start,
                  steps_per_epoch=data.train.steps_per_epoch, validation_data=val_ds,
                  validation_steps=data.val.steps_per_epoch if data.val else None,
                  callbacks=cb, verbose=cfg.training.options.verbose if hvd.rank() == 0
                  else 0)
    if hvd.rank() == 0:
        profiler = cb[-1].profiler

        def save(out: Path) -> dict[str, Any]:  # model.keras and model.onnx (in provenance)
            outputs.save_model(model, out, cfg.training.loss, [])
            return {}

        core.finish(save, lambda: {
            "threads": plan.as_dict(), "device": device, "precision": policy,
            "ranks": profiler.last.get("extra", {}).get("ranks"),
            "cache": data.train.cache.stats()})
    return 0


def run(cfg: TrialDoc, plan: threads.ThreadPlan) -> int:
    import tensorflow as tf

    threads.apply_tf(plan)
    import horovod.tensorflow.keras as hvd

    hvd.init()
    device = gpu.setup_gpu(tf.config, hvd.local_rank(), cfg.gpus)
    policy = gpu.precision_policy(cfg.training.mixed_precision, device)
    tf.keras.mixed_precision.set_global_policy(policy)
    tf.keras.utils.set_random_seed(cfg.seed % 2**31)
    procs = reader_processes(cfg.training.options.reader_processes, plan, device)
    if hvd.rank() == 0:
        log.info("trial %s/%s: %d ranks, device %s, precision %s, threads %s", cfg.study,
                 cfg.trial_number, hvd.size(), device, policy, plan.as_dict())
    cfg.output_dir.mkdir(parents=True, exist_ok=True)
    data = open_data(cfg, hvd.rank(), hvd.size(), procs, gather_threads(plan))
    if hvd.rank() == 0:  # after open_data, which may drop them (unfiltered data)
        log.info("HDF5 reader processes per rank: %d", data.train.processes)
    return run_guarded(data, lambda: fit_and_finish(cfg, plan, data, hvd, device, policy))
