"""Input-wait benchmark: how much of a training epoch the quickstart model spends waiting for input.

Trains examples/models/mlp.py (the quickstart model) in one process on the sample data
(chunked, gzip-compressed HDF5 made by examples/make_sample_data.py in a temporary directory),
with two input pipelines, side by side in this one run:
  gridml  payloads.runtime ShardedLoader -> tf.data (shuffled chunks, window shuffle, read-ahead
          threads, RAM cache)
  naive   per-sample ``x[j]``/``y[j]`` h5py reads in a shuffled order from a Python generator,
          ``tf.data.Dataset.from_generator(...).batch(B)`` (how such loaders are usually written)
Input wait = time the training steps are blocked on the next batch / wall time of the steps,
measured two ways: (a) by difference, 1 - (time of the same steps on one batch held in memory,
the pure compute) / (time of the steps with the pipeline); (b) directly, the time inside the
Python generator that feeds tf.data (for gridml: blocked on its read-ahead queue); (b) misses
tf.data's own per-element cost, which is what makes the naive pipeline slow, so (a) is the
figure to compare.
The naive pipeline is timed over --naive-steps steps (a full epoch would take many minutes).
Goal: gridml < 5%.

    python benchmarks/input_wait.py [--rows 200000] [--batch 256] [--epochs 2]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "examples"))


def _model(x_sample):  # -> keras.Model
    from payloads.runtime.model import adapt_normalization, load_build_model

    from tensorflow import keras

    build = load_build_model(ROOT / "examples/models/mlp.py")
    m = build({"units": 64, "dropout": 0.1, "activation": "relu", "n_layers": 2}, (10,))
    adapt_normalization(m, [x_sample])
    m.compile(optimizer=keras.optimizers.legacy.Adam(1e-3), loss="binary_crossentropy")
    return m


class _Timer:
    """Wraps an iterator; accumulates the time spent producing each item (= blocked time)."""

    def __init__(self, it):
        self.it, self.wait = it, 0.0

    def __iter__(self):
        return self

    def __next__(self):
        t0 = time.perf_counter()
        try:
            return next(self.it)
        finally:
            self.wait += time.perf_counter() - t0


def compute_only(x, y, batch: int, steps: int) -> float:
    """Seconds for ``steps`` training steps on one batch already in memory (no input cost)."""
    import tensorflow as tf

    ds = tf.data.Dataset.from_tensors((x[:batch], y[:batch])).repeat()
    model = _model(x)
    model.fit(ds.take(3), epochs=1, verbose=0)
    t0 = time.perf_counter()
    model.fit(ds.take(steps), epochs=1, steps_per_epoch=steps, verbose=0)
    return time.perf_counter() - t0


def _with_difference(r: dict, compute_s: float) -> dict:
    return {**r, "wait_frac_diff": max(0.0, 1.0 - compute_s / r["time"])}


def gridml_run(train: list[Path], batch: int, epochs: int) -> dict:
    import tensorflow as tf

    from payloads.runtime.cache import BlockCache
    from payloads.runtime.h5source import H5Source
    from payloads.runtime.inputs import ShardedLoader, tf_dataset
    from payloads.runtime.threads import dataset_options, plan_threads

    src = H5Source([str(p) for p in train], ["x", "y"])
    loader = ShardedLoader(src, ["x"], "y", batch=batch, seed=1, window=8, prefetch=8,
                           cache=BlockCache(512 * 2**20))
    model = _model(src.head(20000)["x"])
    ds = tf_dataset(loader, range(epochs), dataset_options(plan_threads(2, 1)))
    times = _EpochTimes(loader)
    model.fit(ds, epochs=epochs, steps_per_epoch=loader.steps_per_epoch, verbose=0,
              callbacks=[times])
    head = src.head(batch)
    compute = compute_only(head["x"], head["y"], batch, loader.steps_per_epoch)
    return _with_difference(times.last(loader.rows_per_epoch), compute)


def naive_run(train: list[Path], batch: int, steps: int) -> dict:
    import h5py
    import numpy as np
    import tensorflow as tf

    files = [h5py.File(p, "r") for p in train]
    index = [(f, j) for f in files for j in range(f["y"].shape[0])]
    order = np.random.default_rng(1).permutation(len(index))

    def samples():
        for k in order:
            f, j = index[k]
            yield f["x"][j], f["y"][j]

    timer = _Timer(samples())
    spec = (tf.TensorSpec((10,), tf.float32), tf.TensorSpec((), tf.float32))
    ds = tf.data.Dataset.from_generator(lambda: timer, output_signature=spec).batch(batch)
    model = _model(files[0]["x"][:20000])
    model.fit(ds.take(3), epochs=1, verbose=0)  # trace first, as the gridml run's epoch 1 does
    timer.wait = 0.0
    t0 = time.perf_counter()
    model.fit(ds.take(steps), epochs=1, verbose=0)
    dt = time.perf_counter() - t0
    compute = compute_only(files[0]["x"][:batch], files[0]["y"][:batch], batch, steps)
    return _with_difference(
        {"wait_frac": timer.wait / dt, "samples_per_s": steps * batch / dt, "time": dt}, compute)


def _EpochTimes(loader):  # a Keras callback made lazily (TensorFlow imported late)
    from tensorflow import keras

    class EpochTimes(keras.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            self.t0, self.w0 = time.perf_counter(), loader.wait_s

        def on_epoch_end(self, epoch, logs=None):
            self.dt, self.wait = time.perf_counter() - self.t0, loader.wait_s - self.w0

        def last(self, rows):
            return {"wait_frac": self.wait / self.dt, "samples_per_s": rows / self.dt,
                    "time": self.dt}

    return EpochTimes()


def main() -> int:
    p = argparse.ArgumentParser(description="input-wait benchmark")
    p.add_argument("--rows", type=int, default=200000)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--epochs", type=int, default=2, help="gridml epochs (the last is reported)")
    p.add_argument("--naive-steps", type=int, default=40)
    a = p.parse_args()
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from payloads.runtime import threads

    threads.apply_env(threads.plan_threads(2, 1))
    threads.apply_tf(threads.plan_threads(2, 1))
    from make_sample_data import make_sample_data

    tmp = Path(tempfile.mkdtemp(prefix="gridml-wait-"))
    try:
        train, _ = make_sample_data(tmp, n_train=a.rows, n_val=1000, n_files=3)
        g = gridml_run(train, a.batch, a.epochs)
        n = naive_run(train, a.batch, a.naive_steps)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"\nquickstart MLP, {a.rows:,} rows in 3 gzip HDF5 files, batch {a.batch}, 1 process\n"
          "| input pipeline | input wait (a: by difference) | (b: in generator) | samples/s "
          "| timed |\n|---|---|---|---|---|")
    for name, r in ((f"gridml loader (epoch {a.epochs})", g),
                    (f"naive per-sample h5py generator ({a.naive_steps} steps)", n)):
        print(f"| {name} | {100 * r['wait_frac_diff']:.1f}% | {100 * r['wait_frac']:.1f}% | "
              f"{r['samples_per_s']:,.0f} | {r['time']:.1f} s |")
    print(f"throughput ratio gridml/naive: {g['samples_per_s'] / n['samples_per_s']:.1f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
