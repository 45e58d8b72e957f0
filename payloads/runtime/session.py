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
from payloads.runtime.pipeline.h5source import H5Source, set_max_open_files, use_layouts
from payloads.runtime.reporter import HttpApi, Reporter
from payloads.runtime.spool import Spool
from payloads.runtime.trial import TrialDoc

log = logging.getLogger("gridml.payload")


@dataclass
class Data:
    train: inputs.ShardedLoader
    val: inputs.ShardedLoader | None
    sources: list[H5Source] = field(default_factory=list)
    test: inputs.ShardedLoader | None = None  # data.test: one pass after training

    @property
    def loaders(self) -> list[inputs.ShardedLoader]:
        return [x for x in (self.train, self.val, self.test) if x is not None]

    def first_error(self) -> BaseException | None:
        return next((ld.error for ld in self.loaders if ld.error is not None), None)


@dataclass(frozen=True)
class Layout:
    """The model's inputs as found in the files (:func:`layout`): ``features`` in the order the
    model receives them (each collection followed by its mask), the ragged ones, the masks made
    from ragged lengths, and the views {name: (collection, channel indices)}."""

    features: tuple[str, ...]
    ragged: tuple[str, ...]
    ragged_masks: tuple[str, ...] = ()
    views: dict[str, tuple[str, list[int]]] = field(default_factory=dict)


def layout(cfg: TrialDoc) -> Layout:
    """How ``cfg.data`` maps onto the first training file: a collection ``c`` is padded (``c``
    and ``c_mask`` stored) or ragged (``c_values`` + ``c_lengths``: padded per batch, its mask
    made from the lengths); a name that is neither is a plain feature (no mask). A view takes
    the channels it names (the collection's ``columns`` attribute) of its collection."""
    d = cfg.data
    if not d.collections and not d.views:
        return Layout(tuple(d.features), tuple(d.ragged))
    import h5py

    feats, ragged, masks = [], list(d.ragged), []
    views: dict[str, tuple[str, list[int]]] = {}
    with h5py.File(d.train[0], "r") as f:
        def channels(c: str) -> list[str]:
            ds = f[f"{c}_values"] if f"{c}_values" in f else f[c]
            cols = ds.attrs.get("columns")
            return [str(x.decode() if isinstance(x, bytes) else x) for x in cols] \
                if cols is not None else []

        view_of = {v["name"]: v for v in d.views}
        for name in d.features:
            if name in view_of:
                v = view_of[name]
                coll, want = str(v["collection"]), [str(x) for x in v["columns"]]
                have = channels(coll)
                missing = [c for c in want if c not in have]
                if missing:
                    raise PayloadFailure(
                        f"data.inputs: {name} takes columns {missing} of {coll}, which has "
                        f"{have or 'no columns attribute'}", code=2)
                views[name] = (coll, [have.index(c) for c in want])
                feats.append(name)
                continue
            feats.append(name)
            if name not in d.collections:
                continue
            if f"{name}_mask" in f:
                feats.append(f"{name}_mask")
            elif f"{name}_values" in f:
                ragged.append(name) if name not in ragged else None
                masks.append(name)
                feats.append(f"{name}_mask")
    return Layout(tuple(feats), tuple(ragged), tuple(masks), views)


def _features(cfg: TrialDoc) -> list[str]:
    return list(layout(cfg).features)


def _columns(cfg: TrialDoc, lay: Layout | None = None) -> list[str]:
    """HDF5 datasets with one row per event: regular features, labels, weights, ragged
    lengths."""
    lay = lay or layout(cfg)
    made = {*lay.ragged, *(f"{r}_mask" for r in lay.ragged_masks), *lay.views}
    return ([f for f in lay.features if f not in made] + [cfg.data.labels]
            + ([cfg.data.weights] if cfg.data.weights else [])
            + [f"{r}_lengths" for r in lay.ragged])


def _loader(src: H5Source, cfg: TrialDoc, shuffle: bool, lay: Layout | None = None,
            **common: Any) -> Any:
    lay = lay or layout(cfg)
    feats, label = list(lay.features), cfg.data.labels
    common.update(weights=cfg.data.weights, views=lay.views)
    if not lay.ragged:
        ld = inputs.ShardedLoader(src, feats, label, shuffle=shuffle, **common)
    else:
        from payloads.runtime.pipeline.ragged import RaggedLoader

        ld = RaggedLoader(src, feats, label, ragged=list(lay.ragged), shuffle=shuffle,
                          bucket=cfg.training.options.bucket_by_length,
                          pad_value=cfg.training.options.pad_value, masks=lay.ragged_masks,
                          **common)
    ld.named = bool(cfg.data.collections or cfg.data.views)
    return ld


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


WINDOW_MIN_ROWS = 8 * 4096  # the default window over 4,096-row chunks (the demo's, prepare's)
WINDOW_MAX_BYTES = 64 << 20


def shuffle_window(chunks: int, block_rows: int, row_bytes: int) -> int:
    """Blocks per shuffle window: ``training.options.shuffle_buffer_chunks``, raised for small
    blocks (chunks) to hold at least 32,768 rows, as 8 chunks of 4,096 rows do, within 64 MiB.
    Each window costs the loader's threads a fixed amount of Python work, which 20-row chunks
    paid every 160 rows (a cached epoch over 10,000 one-chunk files: 0.6-0.9 s of CPU in
    windows of 8 blocks, 0.15 s in windows of 512), competing with the training step for
    the interpreter; the rows are also mixed over more files."""
    want = -(-WINDOW_MIN_ROWS // max(1, block_rows))
    cap = max(1, WINDOW_MAX_BYTES // max(1, block_rows * row_bytes))
    return max(int(chunks), min(want, cap))


def open_data(cfg: TrialDoc, rank: int, ranks: int, processes: int = 0,
              gather: int = 1) -> Data:
    t, opt = cfg.training, cfg.training.options
    lay = layout(cfg)
    set_max_open_files(cfg.data.max_open_files)  # one LRU of open files for all sources
    use_layouts(cfg.data.layouts)  # the files' layout records: no open at start
    train = H5Source(list(cfg.data.train), _columns(cfg, lay))
    if processes and opt.reader_processes in (None, "auto") and train.all_direct:
        log.info("training data is read without HDF5 (preadv, and zlib for gzip chunks): "
                 "no HDF5 reader processes")
        processes = 0  # the reader thread's preadv (+ zlib, which releases the GIL) is faster
    val = H5Source(list(cfg.data.validation), _columns(cfg, lay)) if cfg.data.validation else None
    budget = int(opt.cache_budget_mb * 2**20)
    first = train.read(train.blocks[0])
    block_bytes = sum(a.nbytes for a in first.values())
    raw = block_bytes * len(train.blocks)  # ranks swap blocks
    mode = choose_compression(opt.cache_compression, first, raw, budget)
    cache = BlockCache(budget, mode)
    window = shuffle_window(opt.shuffle_buffer_chunks, train.block_rows,
                            block_bytes // max(1, train.blocks[0].rows))
    if window != opt.shuffle_buffer_chunks and rank == 0:
        log.info("shuffle windows of %d blocks (%d rows; training.options.shuffle_buffer_chunks "
                 "is %d): the input files' chunks are small", window, window * train.block_rows,
                 opt.shuffle_buffer_chunks)
    common = dict(batch=t.batch_size, rank=rank, ranks=ranks, seed=cfg.seed,
                  window=window, prefetch=opt.prefetch_batches, cache=cache,
                  gather_threads=gather)
    tl = _loader(train, cfg, True, lay, processes=processes, **common)
    vl = _loader(val, cfg, False, lay, **common) if val else None
    test = H5Source(list(cfg.data.test), _columns(cfg, lay)) if cfg.data.test else None
    el = _loader(test, cfg, False, lay, **common) if test else None
    if tl.steps_per_epoch == 0:
        raise PayloadFailure(f"data.train has {train.total_rows} rows: fewer than one per rank "
                             f"for {ranks} ranks", code=3)
    return Data(tl, vl, [s for s in (train, val, test) if s is not None], el)


def _input_shape(loader: inputs.ShardedLoader, feats: list[str]) -> Any:
    """Per-event shape of each feature (None for a ragged axis), a tuple of them for several."""
    shapes = [tuple(None if d is None else int(d) for d in loader.row_shape(f)) for f in feats]
    return shapes[0] if len(shapes) == 1 else tuple(shapes)


def build_model(cfg: TrialDoc, data: Data, hvd: Any, metrics: list[str] | None = None) -> Any:
    """The compiled model; ``metrics``: the names Keras computes (default training.metrics),
    weighted by the event weights with data.weights."""
    feats, t = list(data.train.features), cfg.training
    m = user_model.build(cfg.model_file, cfg.hparams, _input_shape(data.train, feats))
    head = data.train.src.head(t.options.adapt_samples)
    if user_model.adapt_normalization(m, [head.get(f) for f in feats], feats):
        log.info("adapted normalisation on the first %d training rows",
                 len(head[data.train.labels]))
    lr = user_model.scaled_lr(cfg.learning_rate, hvd.size(), t.options.lr_scaling)
    compression = (hvd.Compression.fp16 if t.options.gradient_compression == "fp16"
                   else hvd.Compression.none)  # fp16: half the allreduce bytes
    opt = hvd.DistributedOptimizer(user_model.optimizer(t.optimizer, lr), compression=compression)
    _plain_graph_allreduce(opt)
    objs = user_model.metric_objects(list(t.metrics if metrics is None else metrics), t.loss)
    if cfg.data.weights:  # Keras weights only its weighted_metrics by the sample weights
        m.compile(optimizer=opt, loss=t.loss, weighted_metrics=objs)
    else:
        m.compile(optimizer=opt, loss=t.loss, metrics=objs)
    _create_slots(m)
    return m


def _create_slots(model: Any) -> None:
    """The optimizer's slots (Adam's moments, its step counter) made now, not inside the first
    training step: a ``tf.function`` whose first trace creates variables is traced a second time
    without them (the whole train step: ~0.35 s of CPU in every Keras rank). Keras 2.15's legacy
    optimizers (Horovod's) create them all in ``_create_all_weights``, which ``apply_gradients``
    calls; where that method is missing (another Keras) they are made in the first step, as
    before. A mixed-precision LossScaleOptimizer passes it on to the optimizer it wraps."""
    create = getattr(model.optimizer, "_create_all_weights", None)
    if callable(create):
        create(model.trainable_variables)


def _plain_graph_allreduce(opt: Any) -> None:
    """Horovod wraps its gradient allreduce in a ``tf.function`` with AutoGraph on; AutoGraph
    then rewrites Horovod's source (its Python ``if``s are over lists and flags, its one branch on
    a tensor an explicit ``tf.cond``) into the same graph, at ~3 s of CPU in every Keras rank.
    The same function traced without AutoGraph builds that graph directly."""
    fn = getattr(opt, "_allreduce_grads", None)
    python_fn = getattr(fn, "python_function", None)
    if python_fn is None:  # not a tf.function (graph mode, another Horovod): leave it
        return
    import tensorflow as tf

    opt._allreduce_grads = tf.function(python_fn, autograph=False)


def make_reporter(cfg: TrialDoc) -> Reporter:
    http = HttpApi(cfg.api.url, cfg.api.token, cfg.trial_id) if cfg.api else None
    return Reporter(Spool(cfg.output_dir / "metrics.jsonl"), http, cfg.heartbeat_s)
