"""The building blocks of a Keras trial on this rank: its data loaders, its model, its reporter.

:mod:`payloads.runtime.fit` runs them in order."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from payloads.runtime import model as user_model, threads
from payloads.runtime.pipeline import inputs
from payloads.runtime.pipeline.cache import BlockCache, choose_compression
from payloads.runtime.errors import PayloadFailure
from payloads.runtime.pipeline.h5source import H5Source
from payloads.runtime.reporter import HttpApi, Reporter
from payloads.runtime.spool import Spool
from payloads.runtime.trial import TrialDoc

log = logging.getLogger("gridml.payload")


@dataclass
class Data:
    train: inputs.ShardedLoader
    val: inputs.ShardedLoader | None
    sources: list[H5Source] = field(default_factory=list)

    @property
    def loaders(self) -> list[inputs.ShardedLoader]:
        return [x for x in (self.train, self.val) if x is not None]

    def first_error(self) -> BaseException | None:
        return next((ld.error for ld in self.loaders if ld.error is not None), None)


def _features(cfg: TrialDoc) -> list[str]:
    return list(cfg.data.features)


def _columns(cfg: TrialDoc) -> list[str]:
    """HDF5 datasets with one row per event: regular features, labels, ragged lengths."""
    ragged = list(cfg.data.ragged)
    return ([f for f in _features(cfg) if f not in ragged] + [cfg.data.labels]
            + [f"{r}_lengths" for r in ragged])


def _loader(src: H5Source, cfg: TrialDoc, shuffle: bool, **common: Any) -> Any:
    feats, label = _features(cfg), cfg.data.labels
    ragged = list(cfg.data.ragged)
    if not ragged:
        return inputs.ShardedLoader(src, feats, label, shuffle=shuffle, **common)
    from payloads.runtime.pipeline.ragged import RaggedLoader

    return RaggedLoader(src, feats, label, ragged=ragged, shuffle=shuffle,
                        bucket=cfg.training.options.bucket_by_length,
                        pad_value=cfg.training.options.pad_value, **common)


def reader_processes(option: Any, plan: threads.ThreadPlan, device: str) -> int:
    """``training.reader_processes``: a number, or ``auto``: on a GPU the rank's other cores
    decode HDF5 (up to 4); on a CPU the cores train, so reading stays in a thread."""
    if option not in (None, "auto"):
        return max(0, int(option))
    return min(4, plan.per_rank - 1) if device.startswith("GPU") else 0


def gather_threads(plan: threads.ThreadPlan) -> int:
    """Threads that gather each slab of a shuffle window (the loader's costliest step): one on
    a rank with up to 2 cores (there the reader thread and training use the other; a second
    gather thread measured slower on the 2-core machine), else up to a quarter of the rank's
    cores, at most 4 (a GPU node's spare cores)."""
    return 1 if plan.per_rank <= 2 else max(1, min(4, plan.per_rank // 4))


def open_data(cfg: TrialDoc, rank: int, ranks: int, processes: int = 0,
              gather: int = 1) -> Data:
    t, opt = cfg.training, cfg.training.options
    train = H5Source(list(cfg.data.train), _columns(cfg))
    if processes and opt.reader_processes in (None, "auto") and train.all_direct:
        log.info("training data is unfiltered (read with preadv, nothing to decode): "
                 "no HDF5 reader processes")
        processes = 0  # the reader thread's preadv is several times faster than the processes
    val = H5Source(list(cfg.data.validation), _columns(cfg)) if cfg.data.validation else None
    budget = int(opt.cache_budget_mb * 2**20)
    first = train.read(train.blocks[0])
    raw = sum(a.nbytes for a in first.values()) * len(train.blocks)  # ranks swap blocks
    mode = choose_compression(opt.cache_compression, first, raw, budget)
    cache = BlockCache(budget, mode)
    common = dict(batch=t.batch_size, rank=rank, ranks=ranks, seed=cfg.seed,
                  window=opt.shuffle_buffer_chunks, prefetch=opt.prefetch_batches, cache=cache,
                  gather_threads=gather)
    tl = _loader(train, cfg, True, processes=processes, **common)
    vl = _loader(val, cfg, False, **common) if val else None
    if tl.steps_per_epoch == 0:
        raise PayloadFailure(f"data.train has {train.total_rows} rows: fewer than one per rank "
                             f"for {ranks} ranks", code=3)
    return Data(tl, vl, [s for s in (train, val) if s is not None])


def _input_shape(loader: inputs.ShardedLoader, feats: list[str]) -> Any:
    """Per-event shape of each feature (None for a ragged axis), a tuple of them for several."""
    shapes = [tuple(None if d is None else int(d) for d in loader.row_shape(f)) for f in feats]
    return shapes[0] if len(shapes) == 1 else tuple(shapes)


def build_model(cfg: TrialDoc, data: Data, hvd: Any) -> Any:
    feats, t = _features(cfg), cfg.training
    m = user_model.build(cfg.model_file, cfg.hparams, _input_shape(data.train, feats))
    head = data.train.src.head(t.options.adapt_samples)
    if user_model.adapt_normalization(m, [head.get(f) for f in feats]):
        log.info("adapted normalisation on the first %d training rows",
                 len(head[data.train.labels]))
    lr = user_model.scaled_lr(cfg.learning_rate, hvd.size(), t.options.lr_scaling)
    compression = (hvd.Compression.fp16 if t.options.gradient_compression == "fp16"
                   else hvd.Compression.none)  # fp16: half the allreduce bytes
    opt = hvd.DistributedOptimizer(user_model.optimizer(t.optimizer, lr), compression=compression)
    m.compile(optimizer=opt, loss=t.loss, metrics=user_model.metric_objects(list(t.metrics), t.loss))
    return m


def make_reporter(cfg: TrialDoc) -> Reporter:
    http = HttpApi(cfg.api.url, cfg.api.token, cfg.trial_id) if cfg.api else None
    return Reporter(Spool(cfg.output_dir / "metrics.jsonl"), http, cfg.heartbeat_s)
