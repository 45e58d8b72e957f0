"""One Keras trial on this rank: set up Horovod and the device, open the data, ``model.fit`` with
Horovod's and gridml's callbacks; resuming, reporting, should-stop and the outputs go through the
framework-neutral trial core (payloads/runtime/core.py), given Keras's checkpoint and model files."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from payloads.runtime import callbacks as cbs, costs, gpu, outputs, preempt, threads
from payloads.runtime.checkpoint import Checkpointer
from payloads.runtime.errors import CONTINUE_CODE, record_exit_code
from payloads.runtime.core import TrialCore, metric_hook, run_guarded
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


def keras_metric_names(cfg: TrialDoc) -> tuple[Any, list[str], list[str]]:
    """(the model file's metrics hook, the names it gives, the names Keras computes): the
    figures of merit are computed by gridml, a name Keras does not know must come from the
    hook (payloads/runtime/core.py: metric_hook)."""
    from tensorflow import keras

    from payloads.runtime.figures import is_figure
    from payloads.runtime.userfile import import_model_file

    def known(name: str) -> bool:
        if name.lower() in ("accuracy", "auc", "precision", "recall"):
            return True
        if is_figure(name):
            return False
        try:
            return callable(keras.metrics.get(name))
        except (ValueError, TypeError):
            return False

    names = tuple(m for m in cfg.training.metrics if known(m))
    module = import_model_file(cfg.model_file)[0]
    return metric_hook(cfg, module, tuple(n.lower() for n in names) + names)


class FirstBroadcastIsNotSlow(logging.Filter):
    """Drops Keras' "Callback method `on_train_batch_end` is slow ... Check your callbacks." with
    several ranks. Keras averages the batch-end hooks over batches 0-4 but the batch times over
    1-5, so Horovod's one broadcast of the initial weights at the end of batch 0 (~0.25 s for two
    CPU ranks) is taken for a slow hook in every trial, and the warning comes once, then Keras
    stops looking. gridml's own batch-end hooks read a clock (progress.json every few seconds)
    and, only where a preemption warning can come, agree with the other ranks every few batches."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("Callback method `on_train_batch_end` is slow")


def _callbacks(data: Any, hvd: Any, htf: Any, core: TrialCore,
               figs: Any = None) -> list[Any]:
    per_epoch = data.train.rows_per_epoch * hvd.size()
    profiler = cbs.EpochProfiler(data.loaders, htf.allgather_object, lambda: per_epoch)
    report = cbs.EpochReporter(core, profiler, extra=lambda: {"cache": data.train.cache.stats()})
    # One rank has nothing to broadcast or average: Horovod's two callbacks would trace their
    # collectives (two broadcast graphs, ~0.4 s of CPU) to copy the rank's values onto itself
    collective = ([hvd.callbacks.BroadcastGlobalVariablesCallback(0),
                   hvd.callbacks.MetricAverageCallback()] if hvd.size() > 1 else [])
    if collective:  # (Keras logs through TensorFlow's logger)
        logging.getLogger("tensorflow").addFilter(FirstBroadcastIsNotSlow())
    return [*collective, *([figs] if figs is not None else []), profiler, report]


def _columns(loader: Any, cfg: TrialDoc) -> tuple[Any, Any]:
    """The labels and weights (None without data.weights) of every file of ``loader``."""
    import numpy as np

    y = np.concatenate([f[cfg.data.labels][:] for f in loader.src.files])
    w = (np.concatenate([f[cfg.data.weights][:] for f in loader.src.files])
         if cfg.data.weights else None)
    return y, w


def _n_classes(cfg: TrialDoc, y: Any) -> int:
    if y.ndim == 2 and y.shape[1] > 1:
        return int(y.shape[1])
    return int(y.max()) + 1 if "sparse" in cfg.training.loss.lower() else 2


def _datasets(data: Any, plan: threads.ThreadPlan, start: int, epochs: int,
              skip: int = 0) -> tuple[Any, Any]:
    """tf.data over the training epochs still to run (``skip``: the first one's first batches
    left out, a run resumed mid-epoch), and over one validation pass."""
    from payloads.runtime.pipeline.inputs import tf_dataset

    opts = threads.dataset_options(plan)
    if data.val is not None and data.val.steps_per_epoch == 0:
        log.warning("data.validation has fewer rows than ranks: no validation metrics")
        data.val = None
    val_ds = tf_dataset(data.val, None, opts) if data.val is not None else None
    return tf_dataset(data.train, range(start, epochs), opts, skip=skip), val_ds


def _preempt_watch(cfg: TrialDoc, core: TrialCore, ckpt: Checkpointer, model: Any, htf: Any,
                   device: str, steps: int, start: int) -> cbs.PreemptWatch:
    """The callback that checkpoints mid-epoch on a warning (payloads/runtime/preempt.py);
    the agreement is Horovod's all-reduce (MAX) of each rank's flag, every 10th batch on a GPU
    (a host sync), else every batch."""
    import time

    import tensorflow as tf

    def any_rank(flag: bool) -> bool:
        if htf.size() == 1:
            return flag
        return float(htf.allreduce(tf.constant([1.0 if flag else 0.0]), op=htf.Max)[0]) > 0

    def save(epoch: int, batch: int, states: list[Any]) -> None:
        asked = preempt.asked_at()
        wall = time.time() - (time.monotonic() - asked if asked is not None else 0.0)
        ckpt.save_step(model, epoch, batch, {"ranks": states, "signal_wall": wall})

    ranks = core.resume_extra.get("ranks") or []
    mine = ranks[htf.rank()] if len(ranks) == htf.size() else None
    if mine is not None:
        import random

        import numpy as np

        np.random.set_state(mine["numpy"])
        random.setstate(mine["python"])
    return cbs.PreemptWatch(core, preempt.Watch(any_rank, every=10 if "GPU" in device else 1),
                            steps, (start, core.resume_batch), save, htf.allgather_object, mine)


def fit_and_finish(cfg: TrialDoc, plan: threads.ThreadPlan, data: Any, hvd: Any,
                   device: str, policy: str) -> int:
    import horovod.tensorflow as htf  # the object collectives live here, not in .keras

    from payloads.runtime import keras_figures as kf
    from payloads.runtime.core import ValidationFigures, test_figures, weight_factors

    hook, hook_names, keras_names = keras_metric_names(cfg)
    model = build_model(cfg, data, hvd, keras_names)
    model_costs = _costs(cfg, model, data) if hvd.rank() == 0 else {}
    classifier = "crossentropy" in str(cfg.training.loss).lower()
    fig = (ValidationFigures(cfg, "probability", hook, hook_names)
           if data.val is not None and (classifier or hook is not None) else None)
    tfig = (test_figures(cfg, "probability", hook, hook_names)
            if data.test is not None and (classifier or hook is not None) else None)
    ckpt = Checkpointer(cfg.output_dir / "checkpoint")
    core = TrialCore(cfg, hvd.rank(), make_reporter(cfg) if hvd.rank() == 0 else None,
                     lambda obj: htf.broadcast_object(obj, 0),
                     restore=lambda: ckpt.restore(model),
                     save=lambda epoch: ckpt.save(model, epoch), costs=model_costs,
                     figures=fig, checkpointer=ckpt)
    start = core.resume()
    epochs = cfg.training.epochs
    skip = core.resume_batch  # resumed mid-epoch: the first epoch alone, from that batch
    train_ds, val_ds = _datasets(data, plan, start, start + 1 if skip else epochs, skip)
    rest_ds = _datasets(data, plan, start + 1, epochs)[0] if skip and start + 1 < epochs else None
    weighted = bool(cfg.data.weights) or cfg.training.class_weights not in (None, "", {})
    k = 2
    if weighted:  # event weight x class factor, average 1 (core.weight_factors)
        y, w = _columns(data.train, cfg)
        k = _n_classes(cfg, y)
        cw, scale = weight_factors(cfg, y, w, k)
        train_ds = kf.train_weights(train_ds, bool(cfg.data.weights), cw, scale, k)
        if rest_ds is not None:
            rest_ds = kf.train_weights(rest_ds, bool(cfg.data.weights), cw, scale, k)
        if val_ds is not None and cfg.data.weights:
            vw = _columns(data.val, cfg)[1]  # validation: the event weights, average 1
            mean = float(vw.mean()) if vw is not None and len(vw) else 1.0
            val_ds = kf.train_weights(val_ds, True, None, 1.0 / mean if mean > 0 else 1.0, k)
    figs, hist = None, None
    if fig is not None or tfig is not None:  # validation's and/or the test split's figures
        n_out = int(model.outputs[0].shape[-1] or 1) if model.outputs[0].shape.rank > 1 else 1
        if tfig is not None:
            tfig.setup(n_out)
        hist = kf.Histogram(fig or tfig, n_out)  # type: ignore[arg-type]
        kf.install(model, hist)
    if fig is not None and data.val is not None and hist is not None:

        def val_x() -> Any:  # the hook's prediction pass: the features of this rank's shard
            from payloads.runtime.pipeline.inputs import tf_dataset

            ds = tf_dataset(data.val, None, threads.dataset_options(plan))
            return ds.map(lambda x, *rest: x)

        figs = kf.FiguresCallback(
            hist, lambda v: htf.allreduce(v, op=htf.Sum), htf.allgather_object, hvd.rank(),
            val_x if hook is not None else None, lambda: _val_columns(data, cfg))
    cb = _callbacks(data, hvd, htf, core, figs)
    steps = data.train.steps_per_epoch
    if preempt.can_be_warned() or skip:  # (a per-batch callback: only where a warning can come,
        # or to restore a mid-epoch checkpoint's metric sums)
        cb.insert(len(cb) - 1, _preempt_watch(cfg, core, ckpt, model, htf, device, steps, start))
    # resumed mid-epoch: that epoch's remaining batches as one fit, then the epochs after it
    parts = ([(train_ds, start, start + 1, steps - skip)] if skip else
             [(train_ds, start, epochs, steps)]) + ([(rest_ds, start + 1, epochs, steps)]
                                                     if rest_ds is not None else [])
    try:
        for ds, first, last, n in parts if start < epochs else []:
            model.fit(ds, epochs=last, initial_epoch=first, steps_per_epoch=n,
                      validation_data=val_ds,
                      validation_steps=data.val.steps_per_epoch if data.val else None,
                      callbacks=cb, verbose=cfg.training.options.verbose if hvd.rank() == 0
                      else 0)
            if model.stop_training:  # early stopping, a divergence
                break
    except preempt.Continue:  # checkpointed on a warning (every rank): continue me
        record_exit_code(CONTINUE_CODE)  # horovodrun exits 1 whatever its ranks' codes
        return CONTINUE_CODE
    _evaluate_test(cfg, plan, data, model, htf, hvd.rank(), core, hist, tfig, hook, k)
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


def _evaluate_test(cfg: TrialDoc, plan: threads.ThreadPlan, data: Any, model: Any, htf: Any,
                   rank: int, core: TrialCore, hist: Any, tfig: Any, hook: Any, k: int) -> None:
    """Every rank, after training: one pass of ``model.evaluate`` over data.test (the compiled
    loss and metrics averaged over ranks, weighted like validation), the figures of merit from
    the summed histograms and the metrics hook on every rank's scores; rank 0 keeps them for
    the outputs (core.SplitEvaluation), never as an epoch report."""
    import numpy as np
    import tensorflow as tf

    from payloads.runtime import keras_figures as kf
    from payloads.runtime.core import SplitEvaluation
    from payloads.runtime.pipeline.inputs import tf_dataset

    if data.test is None:
        return
    if data.test.steps_per_epoch == 0:
        log.warning("data.test has fewer rows than ranks: no test figures")
        return
    ds = tf_dataset(data.test, None, threads.dataset_options(plan))
    if cfg.data.weights:  # as validation: the event weights, average 1
        tw = _columns(data.test, cfg)[1]
        mean = float(tw.mean()) if tw is not None and len(tw) else 1.0
        ds = kf.train_weights(ds, True, None, 1.0 / mean if mean > 0 else 1.0, k)
    if hist is not None:
        hist.reset()
    got = model.evaluate(ds, steps=data.test.steps_per_epoch, verbose=0, return_dict=True)
    names = sorted(got)
    mean_logs = np.asarray(htf.allreduce(tf.constant([float(got[n]) for n in names], tf.float64),
                                         op=htf.Average))
    logs = dict(zip(names, (float(v) for v in mean_logs)))
    if tfig is not None and hist is not None:
        merged = np.asarray(htf.allreduce(hist.var, op=htf.Sum)).reshape(hist.k, -1)
        gathered = None
        if hook is not None:
            x = tf_dataset(data.test, None, threads.dataset_options(plan)).map(lambda x, *r: x)
            scores = model.predict(x, verbose=0)
            y, w = _val_columns(data, cfg, data.test)
            gathered = htf.allgather_object((y, scores, w))
        if rank == 0:
            logs.update({k_.removeprefix("val_"): v
                         for k_, v in tfig.metrics(merged, gathered).items()})
    if rank == 0:
        core.test = SplitEvaluation(logs, tfig, data.test.src.total_rows)


def _val_columns(data: Any, cfg: TrialDoc, loader: Any = None) -> tuple[Any, Any]:
    """This rank's validation (or ``loader``'s) labels and weights in the order its validation
    pass reads them (one unshuffled pass over its shard)."""
    import numpy as np

    ys, ws = [], []
    for slab in (loader or data.val).slabs([0]):
        ys.append(slab[cfg.data.labels].reshape(-1, *slab[cfg.data.labels].shape[2:]).copy())
        if cfg.data.weights:
            ws.append(slab[cfg.data.weights].reshape(-1).copy())
    y = np.concatenate(ys)
    return y, (np.concatenate(ws) if ws else np.ones(len(y)))


def run(cfg: TrialDoc, plan: threads.ThreadPlan) -> int:
    import tensorflow as tf

    preempt.install()  # SIGUSR1 from now on only asks for a checkpoint (then the pid file)
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
