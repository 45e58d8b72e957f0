"""One Keras trial on this rank: set up Horovod and the device, open the data, ``model.fit`` with
Horovod's and gridml's callbacks, resume from checkpoint, and the outputs."""

from __future__ import annotations

import logging
from typing import Any

from payloads.runtime import callbacks as cbs, costs, gpu, outputs, threads
from payloads.runtime.checkpoint import Checkpointer
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


def _callbacks(cfg: TrialDoc, data: Any, hvd: Any, reporter: Any, ckpt: Any,
               model_costs: dict[str, float] | None = None) -> list[Any]:
    import horovod.tensorflow as htf  # the object collectives live here, not in .keras

    per_epoch = data.train.rows_per_epoch * hvd.size()
    profiler = cbs.EpochProfiler(data.loaders, htf.allgather_object, lambda: per_epoch)
    report = cbs.EpochReporter(
        hvd.rank(), reporter, profiler, ckpt, lambda obj: htf.broadcast_object(obj, 0),
        cfg.early_stopping, extra=lambda: {"cache": data.train.cache.stats()}, costs=model_costs)
    return [hvd.callbacks.BroadcastGlobalVariablesCallback(0),
            hvd.callbacks.MetricAverageCallback(), profiler, report]


def _resume(cfg: TrialDoc, model: Any, hvd: Any, reporter: Any) -> int:
    """Restore the newest checkpoint on every rank; returns the number of epochs already done.

    Rank 0 also clears what an earlier attempt left behind: its result.json, and the spooled
    reports of epochs that will run again (all of them when there is no checkpoint)."""
    done = 0
    if cfg.training.options.checkpoint:
        done = Checkpointer(cfg.output_dir / "checkpoint").restore(model)
    if hvd.rank() == 0:
        (cfg.output_dir / "result.json").unlink(missing_ok=True)
        reporter.spool.truncate_after(done)
        if done:
            log.info("resuming after epoch %d from %s", done, cfg.output_dir / "checkpoint")
    return done


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
    model = build_model(cfg, data, hvd)
    model_costs = _costs(cfg, model, data) if hvd.rank() == 0 else {}
    reporter = make_reporter(cfg) if hvd.rank() == 0 else None
    ckpt = Checkpointer(cfg.output_dir / "checkpoint") if (
        hvd.rank() == 0 and cfg.training.options.checkpoint) else None
    start = _resume(cfg, model, hvd, reporter)
    epochs = cfg.training.epochs
    train_ds, val_ds = _datasets(data, plan, start, epochs)
    cb = _callbacks(cfg, data, hvd, reporter, ckpt, model_costs)
    if start < epochs:
        model.fit(train_ds, epochs=epochs, initial_epoch=start,
                  steps_per_epoch=data.train.steps_per_epoch, validation_data=val_ds,
                  validation_steps=data.val.steps_per_epoch if data.val else None,
                  callbacks=cb, verbose=cfg.training.options.verbose if hvd.rank() == 0
                  else 0)
    if hvd.rank() == 0:
        _finish(cfg, model, reporter, cb[-1], plan, device, policy, data)
    return 0


def _finish(cfg: TrialDoc, model: Any, reporter: Any, report_cb: Any, plan: Any,
            device: str, policy: str, data: Any) -> None:
    out = cfg.output_dir
    reporter.close()
    reports = [r for _, r in sorted(reporter.spool.last_by_epoch().items())]
    final = reports[-1]["metrics"] if reports else {}
    epochs_done = reports[-1]["epoch"] if reports else 0
    pruned = report_cb.stop_reason is not None and epochs_done < cfg.training.epochs
    outputs.save_model(model, out, cfg.training.loss, [])
    outputs.plot_curves(reports, out / "curves.png", f"{cfg.study} trial {cfg.trial_number}")
    runtime = {"threads": plan.as_dict(), "device": device, "precision": policy,
               "ranks": report_cb.profiler.last.get("extra", {}).get("ranks"),
               "cache": data.train.cache.stats(), "posted_epochs": reporter.posted,
               "unposted_epochs": reporter.failed}
    outputs.write_json(out / "provenance.json", outputs.provenance(cfg, final, runtime))
    outputs.write_json(out / "result.json", {
        "state": "pruned" if pruned else "completed", "objective_metrics": final,
        "epochs": epochs_done, "reason": report_cb.stop_reason})
    log.info("trial finished (%s) after %d epochs: %s", "pruned" if pruned else "completed",
             epochs_done, out)


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
    try:
        return fit_and_finish(cfg, plan, data, hvd, device, policy)
    except Exception:
        first = data.first_error()
        if first is not None:  # a reader thread's error is the cause: report it, not the symptom
            raise first from None
        raise
    finally:
        for ld in data.loaders:
            ld.close()
        for s in data.sources:
            s.close()
