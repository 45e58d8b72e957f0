"""Input-wait benchmark: how much of a training epoch the quickstart model spends waiting for input.

Trains examples/models/mlp.py (the quickstart model) in one process on the sample data
(chunked, gzip-compressed HDF5 made by examples/make_sample_data.py in a temporary directory),
with two input pipelines, side by side in this one run:
  gridml  payloads.runtime ShardedLoader -> tf.data (shuffled chunks, window shuffle, read-ahead
          threads), one full epoch per pass; twice: with the RAM cache (the whole dataset is in it
          after the untimed warm-up epoch, so timed epochs decode nothing) and without it
          (``BlockCache(0)``: every epoch reads and gunzips the chunks again, from the page
          cache, as the naive pipeline reads them)
  naive   per-sample ``x[j]``/``y[j]`` h5py reads in a shuffled order from a Python generator,
          ``tf.data.Dataset.from_generator(...).batch(B)`` (how such loaders are usually
          written), --naive-steps steps per pass (a full epoch would take many minutes)
Input wait = time the training steps are blocked on the next batch / wall time of the steps,
measured two ways: (a) by difference, 1 - (time of the same steps on one batch held in memory:
the pure compute) / (time of the steps with the pipeline), each the best of --repeat passes
run alternately (the machine is shared, so single passes are noisy); (b) directly, the time
inside the Python generator that feeds tf.data (for gridml: blocked on its read-ahead queue).
(b) misses tf.data's own per-element cost, which is what makes the naive pipeline slow.
Goal: gridml < 5%.

    python benchmarks/input_wait.py [--rows 200000] [--batch 256] [--repeat 3]

Quick run (issue 22; ``--rows 50000 --repeat 2 --naive-steps 10``, 2 shared cores at load
average 19, so every figure is noisy; the ratios are side by side in one run):

| input pipeline | input wait (a) | (b) | samples/s | vs naive |
|---|---|---|---|---|
| gridml loader, RAM cache (the figure quoted until issue 22) | 13.4% | 1.3% | 16,427 | 16.8x |
| gridml loader, no RAM cache | 11.8% | 2.1% | 12,844 | 13.1x |
| naive per-sample h5py generator (10 steps) | 96.4% | 44.6% | 979 | 1x |

Without the RAM cache gridml runs at ~0.8x its cached rate (it gunzips every chunk each epoch),
13x the naive pipeline; its input wait is within this run's noise of the cached one (the
compute-only time of its pass rose as much: the other jobs), above the 5 % goal on this loaded
machine in both rows.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any
from collections.abc import Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "examples"))


def _model(x_sample: Any) -> Any:
    from tensorflow import keras

    from payloads.runtime.model import adapt_normalization, load_build_model

    build = load_build_model(ROOT / "examples/models/mlp.py")
    m = build({"units": 64, "dropout": 0.1, "activation": "relu", "n_layers": 2}, (10,))
    adapt_normalization(m, [x_sample])
    m.compile(optimizer=keras.optimizers.legacy.Adam(1e-3), loss="binary_crossentropy")
    return m


class _Timer:
    """Wraps an iterator; accumulates the time spent producing each item."""

    def __init__(self, it: Any) -> None:
        self.it, self.wait = it, 0.0

    def __iter__(self) -> _Timer:
        return self

    def __next__(self) -> Any:
        t0 = time.perf_counter()
        try:
            return next(self.it)
        finally:
            self.wait += time.perf_counter() - t0


def _timed_fit(model: Any, ds: Any, steps: int) -> float:
    t0 = time.perf_counter()
    model.fit(ds, epochs=1, steps_per_epoch=steps, verbose=0)
    return time.perf_counter() - t0


def compare(model: Any, make_ds: Callable[[int], Any], wait: Callable[[], float],
            x: Any, y: Any, steps: int, batch: int, repeat: int) -> dict[str, float]:
    """Best-of-``repeat`` time of ``steps`` steps with the pipeline and with one in-memory batch
    (alternating), and the generator wait of the best pipeline pass."""
    import tensorflow as tf

    mem = tf.data.Dataset.from_tensors((x[:batch], y[:batch])).repeat()
    _timed_fit(model, make_ds(0), steps)  # warm-up: traces, fills the cache
    _timed_fit(model, mem, 3)
    best, best_mem, best_wait = float("inf"), float("inf"), 0.0
    for rep in range(1, repeat + 1):
        w0 = wait()
        dt = _timed_fit(model, make_ds(rep), steps)
        if dt < best:
            best, best_wait = dt, wait() - w0
        best_mem = min(best_mem, _timed_fit(model, mem, steps))
    return {"time": best, "compute": best_mem, "wait_frac": best_wait / best,
            "wait_frac_diff": max(0.0, 1.0 - best_mem / best), "samples_per_s": steps * batch / best}


def gridml_run(train: list[Path], batch: int, repeat: int,
               cache_bytes: int = 512 * 2**20) -> dict[str, float]:
    """``cache_bytes`` 0: no RAM cache, every epoch reads and decodes the files again."""
    from payloads.runtime.pipeline.cache import BlockCache
    from payloads.runtime.pipeline.h5source import H5Source
    from payloads.runtime.pipeline.inputs import ShardedLoader, tf_dataset
    from payloads.runtime.threads import dataset_options, plan_threads

    src = H5Source([str(p) for p in train], ["x", "y"])
    loader = ShardedLoader(src, ["x"], "y", batch=batch, seed=1, window=8, prefetch=8,
                           cache=BlockCache(cache_bytes))
    head = src.head(20000)
    opts = dataset_options(plan_threads(2, 1))
    return compare(_model(head["x"]), lambda ep: tf_dataset(loader, [ep], opts),
                   lambda: loader.wait_s, head["x"], head["y"], loader.steps_per_epoch, batch,
                   repeat)


def naive_run(train: list[Path], batch: int, steps: int, repeat: int) -> dict[str, float]:
    import h5py
    import numpy as np
    import tensorflow as tf

    files = [h5py.File(p, "r") for p in train]
    index = [(f, j) for f in files for j in range(f["y"].shape[0])]
    order = np.random.default_rng(1).permutation(len(index))

    def samples() -> Any:
        while True:
            for k in order:
                f, j = index[k]
                yield f["x"][j], f["y"][j]

    timer = _Timer(samples())
    spec = (tf.TensorSpec((10,), tf.float32), tf.TensorSpec((), tf.float32))
    ds = tf.data.Dataset.from_generator(lambda: timer, output_signature=spec).batch(batch)
    x, y = files[0]["x"][:20000], files[0]["y"][:20000]
    return compare(_model(x), lambda ep: ds, lambda: timer.wait, x, y, steps, batch, repeat)


def main() -> int:
    p = argparse.ArgumentParser(description="input-wait benchmark")
    p.add_argument("--rows", type=int, default=200000)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--naive-steps", type=int, default=20)
    a = p.parse_args()
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from payloads.runtime import threads

    threads.apply_env(threads.plan_threads(2, 1))
    threads.apply_tf(threads.plan_threads(2, 1))
    from make_sample_data import make_sample_data

    tmp = Path(tempfile.mkdtemp(prefix="gridml-wait-"))
    try:
        train, _ = make_sample_data(tmp, n_train=a.rows, n_val=1000, n_files=3)
        g = gridml_run(train, a.batch, a.repeat)
        g0 = gridml_run(train, a.batch, a.repeat, cache_bytes=0)
        n = naive_run(train, a.batch, a.naive_steps, a.repeat)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"\nquickstart MLP, {a.rows:,} rows in 3 gzip HDF5 files, batch {a.batch}, 1 process, "
          f"best of {a.repeat}, load average {os.getloadavg()[0]:.1f}\n"
          "| input pipeline | input wait (a: by difference) | (b: in generator) | samples/s "
          "| steps time | same steps, in-memory batch |\n|---|---|---|---|---|---|")
    for name, r in (("gridml loader, RAM cache (one epoch)", g),
                    ("gridml loader, no RAM cache (one epoch)", g0),
                    (f"naive per-sample h5py generator ({a.naive_steps} steps)", n)):
        print(f"| {name} | {100 * r['wait_frac_diff']:.1f}% | {100 * r['wait_frac']:.1f}% | "
              f"{r['samples_per_s']:,.0f} | {r['time']:.2f} s | {r['compute']:.2f} s |")
    print(f"throughput ratio gridml/naive: {g['samples_per_s'] / n['samples_per_s']:.1f}x "
          f"with the RAM cache, {g0['samples_per_s'] / n['samples_per_s']:.1f}x without")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
