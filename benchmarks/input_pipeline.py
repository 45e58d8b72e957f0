"""Input pipeline benchmark: gridml's loader vs the raw h5py limit vs the naive per-sample way.

Writes a >= 2 GB chunked HDF5 file (x: (N, 64) float32, y: (N,) float32, chunks of 8192 rows)
in a temporary directory, then reads one epoch three ways, side by side in this one run:
  raw     sequential h5py reads of whole chunks into numpy, no shuffling (the limit)
  gridml  payloads.runtime ShardedLoader: shuffled chunk order, rows shuffled within a window
          of chunks, batches of 256, background read-ahead (as numpy, and through tf.data)
  naive   per-sample ``x[j]`` in a shuffled order from a Python generator fed to tf.data
          (timed for --naive-seconds and extrapolated: a full epoch would take hours)
and prints samples/s (median of --repeat interleaved passes: the machine is shared; every
pass's figures are printed too) and the ratios (goals: gridml >= 0.9x raw and >= 5x naive on
gzip data; the torch path >= 0.5x raw on uncompressed data). Uncompressed data is read with
``preadv`` at the chunks' file offsets (payloads/runtime/pipeline/chunkio.py): the row "raw preadv" is
that copy alone, the row "every read through HDF5" the torch path without it. The row "tf.data
alone" is the Keras path's ceiling: tf.data's per-batch cost over a slab already in memory.
Every row, the naive ones too, starts from the same page cache, in two sets of rows
(``--page-cache both``, the default): warm, the file read whole, untimed, right before the row's
clock (see ``warm``), and cold, the file dropped from the page cache right before the row's
clock (``fsync`` + ``posix_fadvise(POSIX_FADV_DONTNEED)``, see ``drop``; each set's heading
says what fraction of the file was cached as its rows started, by ``mincore``). (Until issue
22 the naive rows ran after the others without either; cold means this kernel's cache: the
VM's host may still cache its disk.) The file is deleted at the end. The row
"tf.data one element per slab" asks whether a slab-wise Keras ``train_step`` could lift that
ceiling: one element per slab, its batches looped over in one ``tf.function``.
``--only-torch`` (or no TensorFlow, as on a GPU node with its own PyTorch) leaves the
TensorFlow rows out.
The gridml loader is also run with 2 HDF5 reader processes (``training.reader_processes``,
``auto`` on GPU nodes): gzip decoding in parallel despite h5py's lock.
Then, on the sample data, the loader's RAM cache: none vs raw vs blosc2-compressed.
PyTorch rows (when torch is installed): the gridml loader feeding torch tensors as the torch
payload does (``torch.from_numpy`` of each slab, batches are views), and the way users write it
(a ``torch.utils.data.Dataset`` indexing h5py per sample under a ``DataLoader`` with 2 worker
processes, timed for --naive-seconds).

    python benchmarks/input_pipeline.py [--size-gb 2.1] [--compression none|gzip|both]
                                        [--page-cache warm|cold|both]

Quick run (issue 22: 2 shared cores at load average 11-17, so single passes are noisy; the
ratios are side by side in one run), ``--size-gb 0.2 --repeat 1 --naive-seconds 3
--cache-rows 0``, samples/s and the ratio gridml loader (numpy batches) / naive:
| data, page cache | gridml | naive (tf.data) | gridml / naive | gridml torch / naive torch |
|---|---|---|---|---|
| uncompressed, before (naive rows unprimed; load 12-24) | 612 k | 80 | 7,659x | 4,095x |
| uncompressed, warm (every row; load 13) | 688 k | 445 | 1,546x | 1,714x |
| uncompressed, cold (every row; load 13-15) | 387 k | 65 | 5,987x | 2,760x |
| gzip, before (naive rows unprimed; load 21-27) | 87 k | 17 | 5,274x | 5,486x |
| gzip, warm (every row; load 15-17) | 107 k | 21 | 5,074x | 7,519x |
| gzip, cold (every row; load 11-15) | 107 k | 12 | 8,638x | 7,529x |

On warm uncompressed data the naive per-sample reads gain most (80 -> 445 samples/s: they had
read partly from disk): the ratio drops from ~7,700x to ~1,500x, still far above the 5x goal.
gridml / raw stays 0.4-0.5x uncompressed, 0.75-0.8x gzip (numpy batches), in both sets.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import h5py
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from payloads.runtime.pipeline.cache import BlockCache
from payloads.runtime.pipeline.h5source import H5Source
from payloads.runtime.pipeline.inputs import ShardedLoader
from payloads.runtime.session import gather_threads
from payloads.runtime.threads import plan_threads


COLS, CHUNK, BATCH = 64, 8192, 256
CORES = 2  # the trial's cores: the loader's gather threads are sized from them, as a payload does
GATHER = gather_threads(plan_threads(CORES, 1))


def make_file(path: Path, size_gb: float, compression: str | None) -> int:
    """Physics-like float columns (smooth, correlated, not random bits), written chunk by chunk."""
    n = int(size_gb * 1e9 / (COLS * 4 + 4)) // CHUNK * CHUNK
    rng = np.random.default_rng(0)
    base = rng.lognormal(3.0, 0.8, (CHUNK, 1)).astype(np.float32)
    with h5py.File(path, "w") as f:
        kw = dict(compression="gzip", compression_opts=4, shuffle=True) if compression else {}
        x = f.create_dataset("x", (n, COLS), np.float32, chunks=(CHUNK, COLS), **kw)
        y = f.create_dataset("y", (n,), np.float32, chunks=(CHUNK,), **kw)
        scale = np.linspace(0.5, 2.0, COLS, dtype=np.float32)
        for s in range(0, n, CHUNK):
            noise = rng.standard_normal((CHUNK, COLS), dtype=np.float32)
            x[s:s + CHUNK] = np.round(base * scale + noise, 3)
            y[s:s + CHUNK] = (noise[:, 0] > 0).astype(np.float32)
    return n


def raw_preadv(path: Path, cache: str | None = None) -> tuple[int, float]:
    """The same whole chunks read as bytes at their file offsets (``os.preadv`` into a reused
    buffer, as gridml reads unfiltered data: payloads/runtime/pipeline/chunkio.py): the copy alone."""
    from payloads.runtime.pipeline.chunkio import open_direct

    with h5py.File(path, "r") as f:
        fd = os.open(path, os.O_RDONLY)
        try:
            dx, dy = open_direct(str(path), f["x"], fd), open_direct(str(path), f["y"], fd)
            if dx is None or dy is None:
                return 0, 1.0
            bx, by = np.empty((CHUNK, COLS), np.float32), np.empty(CHUNK, np.float32)
            prime(path, cache)
            t0, n, rows = time.perf_counter(), 0, f["x"].shape[0]
            for s in range(0, rows, CHUNK):
                e = min(rows, s + CHUNK)
                dx.read(s, e, bx[:e - s])
                dy.read(s, e, by[:e - s])
                n += e - s
            return n, time.perf_counter() - t0
        finally:
            os.close(fd)


def _slab_stream(rows: int) -> tuple[object, np.ndarray, np.ndarray]:
    """A ``tf.data`` dataset of in-memory slabs (k batches of 256 rows each) from a generator,
    as the Keras payload builds it, holding ``rows`` rows in all; and one slab."""
    import tensorflow as tf

    k = 8 * CHUNK // BATCH
    x = np.random.default_rng(0).standard_normal((k, BATCH, COLS), dtype=np.float32)
    y = np.zeros((k, BATCH), np.float32)
    slabs = max(1, rows // (k * BATCH))

    def gen():
        for _ in range(slabs):
            yield x, y

    sig = (tf.TensorSpec((None, BATCH, COLS), tf.float32), tf.TensorSpec((None, BATCH), tf.float32))
    return tf.data.Dataset.from_generator(gen, output_signature=sig), x, y


def tf_ceiling(rows: int) -> tuple[int, float]:
    """tf.data alone, no reading: the Keras payload's dataset (slabs from a generator, cut into
    batches of 256 by ``from_tensor_slices``) over one slab already in memory, consumed in-graph.
    The per-batch cost of tf.data bounds the Keras path whatever the loader does."""
    import tensorflow as tf

    ds, _x, _y = _slab_stream(rows)
    ds = ds.flat_map(lambda a, b: tf.data.Dataset.from_tensor_slices((a, b))).prefetch(2)
    t0 = time.perf_counter()
    n = int(ds.reduce(tf.constant(0, tf.int64),
                      lambda c, b: c + tf.shape(b[1], out_type=tf.int64)[0]))
    return n, time.perf_counter() - t0


def tf_slab_ceiling(rows: int) -> tuple[int, float]:
    """Whether the Keras path could reach more through tf.data: one dataset element per slab
    (no per-batch tf.data work), its batches looped over inside one ``tf.function``, as a
    slab-wise ``train_step`` would (each batch here does trivial work). What is left is the
    in-graph loop's per-batch cost."""
    import tensorflow as tf

    ds, x, y = _slab_stream(rows)

    @tf.function
    def steps(a, b):
        c = tf.constant(0, tf.int64)
        for i in tf.range(tf.shape(b)[0]):
            c += tf.shape(b[i], out_type=tf.int64)[0] + tf.cast(tf.reduce_sum(a[i][:1]) * 0, tf.int64)
        return c

    steps(x[:1], y[:1])  # traced before the clock
    t0, n = time.perf_counter(), 0
    for a, b in ds.prefetch(2):
        n += int(steps(a, b))
    return n, time.perf_counter() - t0


def warm(path: Path) -> None:
    """Read the whole file (not timed) right before a timed row: every row reads from the page
    cache. Between rows the kernel may page out file pages it saw as cold (this VM runs DAMON's
    proactive reclaim, which pages out memory idle for seconds), so a file read a minute ago is
    not always still cached; without this the row that came after a slow one read from disk."""
    buf = bytearray(8 << 20)
    with open(path, "rb", buffering=0) as f:
        while f.readinto(buf):
            pass


def drop(path: Path) -> None:
    """Drop the file from this machine's page cache (not timed), right before a cold row:
    written-back first (``fsync``: dirty pages are not dropped), then
    ``posix_fadvise(POSIX_FADV_DONTNEED)``. (The VM's host may still cache its disk: "cold"
    here is this kernel's cache, not a spinning disk.)"""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def resident(path: Path) -> float:
    """The fraction of the file's pages in the page cache (``mincore``), to show what a row
    started from."""
    import ctypes
    import mmap

    size = path.stat().st_size
    if size == 0:
        return 0.0
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                          ctypes.c_int, ctypes.c_long]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    pages = (size + mmap.PAGESIZE - 1) // mmap.PAGESIZE
    fd = os.open(path, os.O_RDONLY)
    try:
        addr = libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        if addr in (None, ctypes.c_void_p(-1).value):
            return float("nan")
        try:
            vec = (ctypes.c_ubyte * pages)()
            if libc.mincore(ctypes.c_void_p(addr), size, vec) != 0:
                return float("nan")
            return sum(b & 1 for b in vec) / pages
        finally:
            libc.munmap(ctypes.c_void_p(addr), size)
    finally:
        os.close(fd)


def prime(path: Path, cache: str | None) -> None:
    """The page cache as a row starts, the same for every row (not timed): ``warm`` reads the
    whole file (:func:`warm`), ``cold`` drops it (:func:`drop`), None leaves it as it is.
    Called right before each row's clock (after its untimed warm-up, if any)."""
    if cache == "warm":
        warm(path)
    elif cache == "cold":
        drop(path)


def raw(path: Path, cache: str | None = None) -> tuple[int, float]:
    prime(path, cache)
    t0, n = time.perf_counter(), 0
    with h5py.File(path, "r") as f:
        x, y = f["x"], f["y"]
        for s in range(0, x.shape[0], CHUNK):
            n += len(x[s:s + CHUNK])
            y[s:s + CHUNK]
    return n, time.perf_counter() - t0


def _count_tf(loader: ShardedLoader, take: int = -1) -> int:
    import tensorflow as tf

    from payloads.runtime.pipeline.inputs import tf_dataset
    from payloads.runtime.threads import dataset_options, plan_threads

    ds = tf_dataset(loader, [0], dataset_options(plan_threads(2, 1))).take(take)
    return int(ds.reduce(tf.constant(0, tf.int64),
                         lambda c, b: c + tf.shape(b[1], out_type=tf.int64)[0]))


def gridml(path: Path, via_tf: bool, processes: int = 0,
           cache: str | None = None) -> tuple[int, float, float]:
    """One shuffled epoch; through tf.data it is consumed in-graph (``reduce``), as Keras'
    training loop consumes it, not by a Python loop over eager tensors (after a warm-up that
    pays TensorFlow's one-time start: graph building, thread pools)."""
    src = H5Source([str(path)], ["x", "y"])

    def make() -> ShardedLoader:
        return ShardedLoader(src, ["x"], "y", batch=BATCH, seed=1, window=8, prefetch=8,
                             cache=BlockCache(0), processes=processes, gather_threads=GATHER)

    if via_tf:
        warm = make()
        _count_tf(warm, take=10)
        warm.close()
    loader = make()
    if processes:  # start the reader processes before the clock (a trial starts them once)
        loader._request([])
    prime(path, cache)
    t0, n = time.perf_counter(), 0
    if via_tf:
        n = _count_tf(loader)
    else:  # as a training loop consumes them: recycled slab buffers
        for x, _ in loader.batches([0], reuse=True):
            n += len(x)
    dt = time.perf_counter() - t0
    loader.close()
    src.close()
    return n, dt, loader.wait_s


def gridml_torch(path: Path, direct: bool = True,
                 cache: str | None = "warm") -> tuple[int, float, float]:
    """Two shuffled epochs in one stream, as the torch payload consumes them
    (payloads.runtime.torch_fit.batches on the CPU: zero-copy tensors, recycled slab buffers):
    (rows per epoch, seconds of the first epoch, of the second). The first includes the
    loader's start (threads, first touch of its buffers), paid once per trial; the second is
    what every later epoch runs at. ``direct=False``: every read through HDF5. ``cache``:
    the page cache at the start (:func:`prime`); the second epoch reads what the first left."""
    import torch

    from payloads.runtime.torch_fit import batches

    prime(path, cache)
    src = H5Source([str(path)], ["x", "y"], direct=direct)
    loader = ShardedLoader(src, ["x"], "y", batch=BATCH, seed=1, window=8, prefetch=8,
                           cache=BlockCache(0), gather_threads=GATHER)
    per, n = loader.rows_per_epoch, 0
    marks = [time.perf_counter()]
    for _x, y, _w in batches(loader, [0, 1], torch.device("cpu")):
        n += int(y.shape[0])
        if n == per:
            marks.append(time.perf_counter())
    marks.append(time.perf_counter())
    loader.close()
    src.close()
    return per, marks[1] - marks[0], marks[2] - marks[1]


def torch_pass(path: Path, cache: str = "warm") -> dict[str, tuple[float, ...]]:
    """:func:`gridml_torch` (direct reads, then every read through HDF5) in a fresh interpreter
    without TensorFlow, as the torch payload runs: TensorFlow's and torch's thread pools in one
    process made the torch rows up to 2x slower than the same code alone. The raw reads are
    timed there too, right before and right after the direct-read stream ("raw" in the result:
    rows/s before, after): this shared machine's speed drifts by up to 2x within a minute, so
    the ratio to the raw reads seconds away is the fairer one."""
    import json
    import subprocess

    code = ("import json, sys; from pathlib import Path; sys.path.insert(0, sys.argv[1]); "
            "import input_pipeline as ip; p, c = Path(sys.argv[2]), sys.argv[3]; "
            "b = ip.raw(p, c); d = ip.gridml_torch(p, True, c); a = ip.raw(p, c); "
            "print(json.dumps({'direct': d, 'h5': ip.gridml_torch(p, False, c), "
            "'raw': [b[0] / b[1], a[0] / a[1]]}))")
    out = subprocess.run([sys.executable, "-c", code, str(Path(__file__).parent), str(path),
                          cache],
                         capture_output=True, text=True, check=True, timeout=1800)
    return {k: tuple(v) for k, v in json.loads(out.stdout.strip().splitlines()[-1]).items()}


class _H5Dataset:  # the usual user code: one h5py read per sample, the file opened per worker
    def __init__(self, path: Path) -> None:
        self.path, self.f = str(path), None
        with h5py.File(self.path, "r") as f:
            self.n = f["y"].shape[0]

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, j: int) -> tuple[np.ndarray, np.float32]:
        if self.f is None:
            self.f = h5py.File(self.path, "r")
        return self.f["x"][j], self.f["y"][j]


def naive_torch(path: Path, seconds: float, workers: int = 2,
                cache: str | None = None) -> tuple[int, float]:
    import torch

    dl = torch.utils.data.DataLoader(_H5Dataset(path), batch_size=BATCH, shuffle=True,
                                     num_workers=workers, persistent_workers=False)
    it = iter(dl)
    next(it)  # workers started (not timed)
    prime(path, cache)
    t0, n = time.perf_counter(), 0
    for _, y in it:
        n += int(y.shape[0])
        if time.perf_counter() - t0 > seconds:
            break
    dt = time.perf_counter() - t0
    del it
    return n, dt


def naive(path: Path, seconds: float, cache: str | None = None) -> tuple[int, float]:
    import tensorflow as tf

    f = h5py.File(path, "r")
    x, y = f["x"], f["y"]
    order = np.random.default_rng(1).permutation(x.shape[0])

    def gen():
        for j in order:
            yield x[j], y[j]

    spec = (tf.TensorSpec((COLS,), tf.float32), tf.TensorSpec((), tf.float32))
    ds = tf.data.Dataset.from_generator(gen, output_signature=spec).batch(BATCH)
    prime(path, cache)
    t0, n = time.perf_counter(), 0
    for bx, _ in ds:  # eager loop: per-sample h5py reads dominate by orders of magnitude
        n += int(bx.shape[0])
        if time.perf_counter() - t0 > seconds:
            break
    dt = time.perf_counter() - t0
    f.close()
    return n, dt


def run(compression: str | None, size_gb: float, naive_s: float, repeat: int,
        only_torch: bool = False, caches: tuple[str, ...] = ("warm", "cold")) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="gridml-bench-"))
    try:
        path = tmp / "big.h5"
        t0 = time.perf_counter()
        rows = make_file(path, size_gb, compression)
        gb = path.stat().st_size / 1e9
        print(f"\n## {compression or 'uncompressed'}: {rows:,} rows x {COLS} float32, file "
              f"{gb:.2f} GB on disk ({rows * (COLS + 1) * 4 / 1e9:.2f} GB decoded), written in "
              f"{time.perf_counter() - t0:.0f} s")
        raw(path)  # not timed: the file was just written (its pages may still be written back)
        for cache in caches:
            rows_for(path, rows, cache, naive_s, repeat, only_torch)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def rows_for(path: Path, rows: int, cache: str, naive_s: float, repeat: int,
             only_torch: bool) -> None:
    """Every row, the naive ones too, starting from the same page cache: ``warm`` (the whole
    file read right before the clock) or ``cold`` (the file dropped from it right before)."""
    runs: dict[str, list[float]] = {}
    start: dict[str, list[float]] = {}  # the file's fraction in the page cache as rows start

    def rec(key: str, n: int, dt: float) -> None:
        runs.setdefault(key, []).append(n / dt)

    def probe(key: str) -> None:
        start.setdefault(key, []).append(resident(path))

    torch, tf = _has("torch"), _has("tensorflow") and not only_torch
    adjacent: dict[str, list[float]] = {}  # torch rows / the raw reads next to them
    load0 = os.getloadavg()[0]
    prime(path, cache)
    probe("any row")
    for _ in range(repeat):  # interleaved, median of `repeat`: the machine is shared
        rec("raw", *raw(path, cache))
        rec("raw_preadv", *raw_preadv(path, cache))
        n, dt, _w = gridml(path, False, cache=cache)
        rec("gridml", n, dt)
        if tf:
            n, dt, _w = gridml(path, True, cache=cache)
            rec("gridml_tf", n, dt)
            rec("tf_ceiling", *tf_ceiling(rows))
            rec("tf_slab_ceiling", *tf_slab_ceiling(rows))
            n, dt, _w = gridml(path, True, processes=2, cache=cache)
            rec("gridml_procs", n, dt)
        if torch:
            t = torch_pass(path, cache)
            n, first, second = t["direct"]
            rec("gridml_torch", n, first)
            rec("gridml_torch_2", n, second)
            near = float(np.mean(t["raw"]))  # the raw reads just before and after
            adjacent.setdefault("gridml_torch", []).append(n / first / near)
            adjacent.setdefault("gridml_torch_2", []).append(n / second / near)
            n, first, second = t["h5"]
            rec("gridml_torch_h5", n, first)
    res = {k: float(np.median(v)) for k, v in runs.items()}
    if tf:
        n, dt = naive(path, naive_s, cache)
        res["naive"] = n / dt
    if torch:
        n, dt = naive_torch(path, naive_s, cache=cache)
        res["naive_torch"] = n / dt
    print(f"\n### page cache {cache}: every row starts with the file "
          f"{'read whole' if cache == 'warm' else 'dropped from it'} (in cache as a row "
          f"starts: {100 * float(np.mean(start['any row'])):.0f}%)")
    print(f"load average {load0:.1f} at the start, {os.getloadavg()[0]:.1f} at the end; "
          f"median of {repeat} interleaved passes; each pass's figures:")
    for k, v in runs.items():
        print(f"  {k}: " + ", ".join(f"{x / 1e6:.2f} M" for x in v))
    for key in ("gridml_torch", "gridml_torch_2"):
        ratios = [g / r for g, r in zip(runs.get(key, []), runs["raw"])]
        if ratios:
            print(f"  {key} / raw per pass: " + ", ".join(f"{x:.2f}x" for x in ratios))
        if adjacent.get(key):
            print(f"  {key} / the raw reads right before and after it, per pass: "
                  + ", ".join(f"{x:.2f}x" for x in adjacent[key])
                  + f" (median {np.median(adjacent[key]):.2f}x)")
    _print(res)


def cache_modes(rows: int) -> None:
    """The RAM cache on the sample data (gzip files): no cache vs cached raw vs cached blosc2,
    an epoch after the cache was filled; and the memory each cache takes."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
    from make_sample_data import make_sample_data

    tmp = Path(tempfile.mkdtemp(prefix="gridml-cache-"))
    try:
        train, _ = make_sample_data(tmp, n_train=rows, n_val=1000, n_files=3)
        print(f"\n## RAM cache, sample data ({rows:,} rows x 10 float32 in 3 gzip files, "
              f"{sum(p.stat().st_size for p in train) / 1e6:.0f} MB on disk, "
              f"{rows * 44 / 1e6:.0f} MB decoded)\n"
              "| cache | epoch samples/s (2nd epoch) | cache size | vs no cache |\n|---|---|---|---|")
        base = None
        for mode, budget in (("none (reads the files)", 0), ("raw", 2**31), ("blosc2", 2**31)):
            src = H5Source([str(p) for p in train], ["x", "y"])
            cache = BlockCache(budget, "blosc2" if mode == "blosc2" else "none")
            loader = ShardedLoader(src, ["x"], "y", batch=BATCH, seed=1, cache=cache)
            sum(len(y) for _, y in loader.batches([0]))
            t0 = time.perf_counter()
            n = sum(len(y) for _, y in loader.batches([1]))
            thr = n / (time.perf_counter() - t0)
            base = base or thr
            print(f"| {mode} | {thr:,.0f} | {cache.stats()['used_mb']} MB | {thr / base:.1f}x |")
            src.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _has(module: str) -> bool:
    """Without importing it here (the torch rows run in their own interpreter; a GPU node's
    PyTorch environment has no TensorFlow: its rows are left out)."""
    import importlib.util

    return importlib.util.find_spec(module) is not None


def _print(r: dict[str, float]) -> None:
    naive = r.get("naive") or r.get("naive_torch") or 0.0
    print("| reader | samples/s | vs raw | vs naive |\n|---|---|---|---|")
    for k, label in (("raw", "raw sequential whole chunks (h5py)"),
                     ("raw_preadv", "raw whole chunks as bytes (preadv, unfiltered data only)"),
                     ("gridml", "gridml loader, shuffled epoch (numpy batches)"),
                     ("gridml_tf", "gridml loader, shuffled epoch, through tf.data"),
                     ("tf_ceiling", "tf.data alone over an in-memory slab (no reading)"),
                     ("tf_slab_ceiling", "tf.data one element per slab, batches looped in-graph"),
                     ("gridml_procs", "same, HDF5 decoded by 2 reader processes"),
                     ("gridml_torch", "gridml loader, shuffled epoch, as torch tensors"),
                     ("gridml_torch_2", "same, the second epoch of the stream (steady state)"),
                     ("gridml_torch_h5", "same, every read through HDF5 (direct=False)"),
                     ("naive", "naive per-sample h5py generator in tf.data"),
                     ("naive_torch", "torch Dataset per-sample h5py, DataLoader 2 workers")):
        if k not in r:
            continue
        if r[k] > 0:
            vs_naive = f"{r[k] / naive:,.1f}x" if naive else "-"
            print(f"| {label} | {r[k]:,.0f} | {r[k] / r['raw']:.2f}x | {vs_naive} |")


def main() -> int:
    p = argparse.ArgumentParser(description="input pipeline benchmark")
    p.add_argument("--size-gb", type=float, default=2.1)
    p.add_argument("--compression", choices=["none", "gzip", "both"], default="both")
    p.add_argument("--naive-seconds", type=float, default=10.0)
    p.add_argument("--repeat", type=int, default=3, help="median of N interleaved passes")
    p.add_argument("--only-torch", action="store_true",
                   help="leave out the TensorFlow rows (also when TensorFlow is not installed)")
    p.add_argument("--page-cache", choices=["warm", "cold", "both"], default="both",
                   help="every row reads the file from the page cache (warm), or from disk "
                        "(cold: dropped before each row), or both sets of rows")
    p.add_argument("--cache-rows", type=int, default=2_000_000,
                   help="rows of sample data for the RAM cache comparison (0: skip)")
    a = p.parse_args()
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    for c in (["none", "gzip"] if a.compression == "both" else [a.compression]):
        run(None if c == "none" else c, a.size_gb, a.naive_seconds, a.repeat, a.only_torch,
            ("warm", "cold") if a.page_cache == "both" else (a.page_cache,))
    if a.cache_rows:
        cache_modes(a.cache_rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
