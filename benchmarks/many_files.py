"""The same rows in 10 / 1,000 / 10,000 HDF5 files: what the file count costs the payload's input
pipeline (issue 28; docs/data.md "Many files").

Each case runs in a fresh process under ``ulimit -n 1024`` (soft and hard: the usual limit of
login and compute nodes), as a trial's rank does: the training source is opened and checked
(*start*: ``H5Source``, the first batch included; every case has the same chunks, of
``rows / max(cases)`` rows, so the file count alone differs), two shuffled epochs are read
through ``ShardedLoader`` with the trial's default RAM cache (1 GiB): *epoch 1* from the files,
*epoch 2* from the cache (rows/s each), the source is closed (*end*). A thread samples the
process's descriptors (``/proc/self/fd``) every 2 ms (*peak fds*, against the LRU's bound).
``--pages cold`` drops the files' pages from the page cache first (``posix_fadvise(DONTNEED)``
on these files only: files just staged, or on a parallel filesystem); ``hot`` leaves them.
The loader's read-ahead (payloads/runtime/pipeline/readahead.py) decides by itself
(*read_wait_us*: the median block read it timed; *read_ahead_blocks*: blocks it warmed).
The shuffle quality of the bounded order (the window of files) is computed from the plan alone
against the full permutation, for the 10,000-file case: (a) files sorted by class (5,000 of
each): the standard deviation of the class fraction over 8-block shuffle windows (lower is
better mixed; independent draws: sqrt(0.25/8) = 0.177); (b) the stretch of the epoch a file's
blocks are spread over (full permutation: ~(k-1)/(k+1) of it for k blocks).

With ``--layouts both`` (the default) each case runs without layout records (the start opens
every file once) and with them (payloads/runtime/pipeline/layouts.py: records made once, as
``gridml data put`` makes them, *record_s*; written as the sidecar a campaign's stage-in
writes; the child reads it inside the timed start, as the payload does from trial.json's
``data.layouts``: only the first file is opened).

    python benchmarks/many_files.py [--rows 200000] [--cases 10,1000,10000] [--json out.json]
                                    [--layouts both|off|on] [--pages both|hot|cold]
                                    [--compression none|gzip] [--readers direct|hdf5|both]

Measured (``--rows 200000``: 20 rows a file at 10,000 files, chunks of 20 rows everywhere; the
shared 2-core machine at a load average of 2.6-4.2, so single figures vary up to 2x; epochs
as a ratio to the 10-file case of the same row):

| files | records | pages | start | epoch 1 | epoch 2 (cache) | end | peak fds |
|---|---|---|---|---|---|---|---|
| 10 | no | hot / cold | 0.22 / 0.30 s | 127,000 / 130,000 rows/s | 215,000 / 248,000 rows/s | 0.5 ms | 14 |
| 1,000 | no | hot / cold | 1.5 / 1.4 s | 0.75x / 1.34x | 1.32x / 1.22x | 2 ms | 260 |
| 10,000 | no | hot / cold | 19.2 / 12.3 s | 0.90x / 0.91x | 1.28x / 1.57x | 3 ms | 260 |
| 10 | yes | hot / cold | 0.18 / 0.22 s | 163,000 / 127,000 rows/s | 359,000 / 270,000 rows/s | 0.5 ms | 14 |
| 1,000 | yes | hot / cold | 0.17 / 0.19 s | 0.49x / 0.76x | 0.90x / 0.89x | 1-2 ms | 260 |
| 10,000 | yes | hot / cold | 0.74 / 0.92 s | 0.70x / 0.60x | 0.67x / 1.05x | 2-3 ms | 260 |

(bound 256: 260 = 256 + the process's 4 descriptors; the read-ahead went on in the cold cases
with records, where the median read waited 170-236 us; shuffle: class spread 0.175 bounded vs
0.177 full for 10,000 files of one block.)
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

LIMIT = 1024
FEATURES = 10


def write(d: Path, rows: int, files: int, chunk: int, gzip: bool = False) -> list[str]:
    """``rows`` rows of 10 float32 features + a label, cut into ``files`` files (chunks of
    ``chunk`` rows at most; uncompressed, or with ``gzip`` as `gridml demo-data` writes them:
    deflate level 4 after HDF5's shuffle filter)."""
    import h5py
    import numpy as np

    d.mkdir(parents=True, exist_ok=True)
    per = rows // files
    chunk = min(per, chunk)
    rng = np.random.default_rng(0)
    paths = []
    kw: dict[str, Any] = dict(compression="gzip", compression_opts=4, shuffle=True) if gzip else {}
    for i in range(files):
        p = d / f"f{i:05d}.h5"
        if not p.exists():
            with h5py.File(p, "w") as f:
                f.create_dataset("x", data=rng.random((per, FEATURES), np.float32),
                                 chunks=(chunk, FEATURES), **kw)
                f.create_dataset("y", data=(rng.random(per) < 0.5).astype(np.float32),
                                 chunks=(chunk,), **kw)
        paths.append(str(p))
    return paths


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def one_case(paths: list[str], sidecar: str | None = None, cold: bool = False,
             hdf5: bool = False) -> dict:
    """Runs in the child: start, two epochs, end, peak descriptors. ``cold``: the files' pages
    are dropped from the page cache first (``posix_fadvise(DONTNEED)`` on these files only),
    as for files just staged or read from a parallel filesystem (the start's check pass,
    without layout records, reads each file's metadata back). ``hdf5``: every read through
    HDF5 (``H5Source(direct=False)``: how compressed files were read before chunkio decoded
    their chunks)."""
    from payloads.runtime.pipeline.cache import BlockCache
    from payloads.runtime.pipeline.h5source import H5Source, open_files, use_layouts
    from payloads.runtime.pipeline.inputs import ShardedLoader
    from payloads.runtime.session import shuffle_window

    peak, stop = [_fds()], threading.Event()

    def sample() -> None:
        while not stop.is_set():
            peak.append(_fds())
            time.sleep(0.002)

    if cold:
        for p in paths:
            fd = os.open(p, os.O_RDONLY)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            os.close(fd)
    base = _fds()
    threading.Thread(target=sample, daemon=True).start()
    pool = open_files()
    t0 = time.perf_counter()
    use_layouts([sidecar] if sidecar else [])
    src = H5Source(paths, ["x", "y"], direct=not hdf5)
    cache = BlockCache(1024 << 20)  # the trial's default training.options.cache_budget_mb
    window = shuffle_window(8, src.block_rows, 4 * (FEATURES + 1))  # as the payload sizes it
    ld = ShardedLoader(src, ["x"], "y", batch=512, seed=1, window=window, prefetch=8, cache=cache)
    it = ld.batches([0])
    rows = len(next(it)[1])
    t_start = time.perf_counter() - t0
    t1 = time.perf_counter()
    for _x, y in it:
        rows += len(y)
    t_epoch = time.perf_counter() - t1
    t1 = time.perf_counter()
    rows2 = sum(len(y) for _x, y in ld.batches([1]))
    t_epoch2 = time.perf_counter() - t1
    warmed = ld._ra.warmed if ld._ra is not None else 0
    ld.close()
    t2 = time.perf_counter()
    src.close()
    t_end = time.perf_counter() - t2
    stop.set()
    return {"files": len(paths), "rows": rows, "pages": "cold" if cold else "hot",
            "start_s": round(t_start, 3), "epoch1_s": round(t_epoch, 3),
            "rows_per_s": round(rows / t_epoch), "epoch2_rows_per_s": round(rows2 / t_epoch2),
            "end_s": round(t_end, 4), "peak_fds": max(peak), "base_fds": base,
            "bound": pool.capacity, "peak_open_files": pool.peak, "opens": pool.opens,
            "read_wait_us": ld.read_wait_us, "read_ahead_blocks": warmed,
            "cache_hit_rate": cache.stats()["hit_rate"],
            "shuffle_cycle": src.shuffle_cycle, "rlimit": resource.getrlimit(resource.RLIMIT_NOFILE)[0],
            "layouts": bool(sidecar), "opened_at_start": src.check_opened,
            "window_blocks": window, "reads": "hdf5" if hdf5 else ("direct" if src.all_direct else "hdf5 (filter)"),
            "load_avg": round(os.getloadavg()[0], 1)}


def shuffle_quality(files: int, blocks_per_file: int, cycle: int, seeds: int = 3) -> dict:
    import numpy as np

    from payloads.runtime.pipeline import plan

    f = [i for i in range(files) for _ in range(blocks_per_file)]
    cls = np.array([i >= files // 2 for i in f], float)

    def stats(order: list[int]) -> tuple[float, float]:
        o = np.array(order)
        w = cls[o][: len(o) // 8 * 8].reshape(-1, 8).mean(1).std()
        pos = np.empty(len(o))
        pos[o] = np.arange(len(o))
        fi = np.array(f)
        lo = np.full(files, np.inf)
        hi = np.full(files, -np.inf)
        np.minimum.at(lo, fi, pos)
        np.maximum.at(hi, fi, pos)
        spread = float(np.mean((hi - lo) / len(o)))
        return float(w), spread

    out: dict[str, Any] = {}
    for name, c in (("full", 0), ("bounded", cycle)):
        s = np.array([stats(plan.block_order(len(f), seed, 0, files=f, cycle=c))
                      for seed in range(seeds)]).mean(0)
        out[name] = {"class_std_per_window": round(s[0], 4), "file_spread": round(s[1], 4)}
    out["cycle"] = cycle
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--cases", default="10,1000,10000")
    ap.add_argument("--dir", type=Path, default=None)
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--layouts", choices=("both", "off", "on"), default="both")
    ap.add_argument("--pages", choices=("both", "hot", "cold"), default="both")
    ap.add_argument("--compression", choices=("none", "gzip"), default="none")
    ap.add_argument("--readers", choices=("direct", "hdf5", "both"), default="direct",
                    help="hdf5: every read through HDF5, as compressed files were read before")
    ap.add_argument("--hdf5", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--child", type=Path, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--cold", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--sidecar", default=None, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child is not None:
        print(json.dumps(one_case(json.loads(a.child.read_text()), a.sidecar, a.cold, a.hdf5)))
        return
    base = a.dir or Path(tempfile.gettempdir()) / "gridml-many-files"
    results = []
    cases = [int(c) for c in a.cases.split(",")]
    chunk = a.rows // max(cases)  # the same blocks in every case: the file count alone differs
    modes = {"both": (False, True), "off": (False,), "on": (True,)}[a.layouts]
    pages = {"both": (False, True), "hot": (False,), "cold": (True,)}[a.pages]
    readers = {"both": (False, True), "direct": (False,), "hdf5": (True,)}[a.readers]
    gz = a.compression == "gzip"
    for files in cases:
        t = time.perf_counter()
        name = f"{files}-{chunk}" + ("-gz" if gz else "")
        paths = write(base / name, a.rows, files, chunk, gz)
        lst = base / f"{name}.json"
        lst.write_text(json.dumps(paths))
        wrote = time.perf_counter() - t
        sidecar, record_s = None, None
        for with_layouts, cold, hdf5 in [(m, c, h) for m in modes for c in pages for h in readers]:
            extra: list[str] = (["--cold"] if cold else []) + (["--hdf5"] if hdf5 else [])
            if with_layouts and sidecar is None:
                from payloads.runtime.pipeline import layouts

                t = time.perf_counter()
                recs = [(p, layouts.make_record(p)) for p in paths]  # what `data put` records
                record_s = round(time.perf_counter() - t, 2)
                sidecar = layouts.write_sidecar(base / f"{name}-inputs", "user.bench:ds",
                                                recs)
            if with_layouts:
                extra += ["--sidecar", str(sidecar)]
            proc = subprocess.run(
                [sys.executable, __file__, "--child", str(lst), *extra], capture_output=True,
                text=True, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=1800,
                preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (LIMIT, LIMIT)))
            if proc.returncode:
                raise SystemExit(proc.stderr[-3000:])
            r = json.loads(proc.stdout.splitlines()[-1])
            r["write_s"], r["record_s"] = round(wrote, 1), record_s if with_layouts else None
            results.append(r)
            print(json.dumps(r), flush=True)
    for r in results:
        ref = next(x for x in results if x["layouts"] == r["layouts"]
                   and x["pages"] == r["pages"] and x["reads"] == r["reads"])  # the fewest files
        r["start_end_over_ref_s"] = round(r["start_s"] + r["end_s"] - ref["start_s"] - ref["end_s"], 2)
        r["throughput_vs_ref"] = round(r["rows_per_s"] / ref["rows_per_s"], 2)
        r["epoch2_vs_ref"] = round(r["epoch2_rows_per_s"] / ref["epoch2_rows_per_s"], 2)
        r["fds_within_bound"] = r["peak_fds"] - r["base_fds"] <= r["bound"]
    big = max(results, key=lambda r: r["files"])
    cycle = max(1, big["bound"] // 2)
    q = {f"{files} files x {k} blocks": shuffle_quality(files, k, cycle)
         for files, k in ((big["files"], max(1, (a.rows // big["files"] + 1023) // 1024)),
                          (2500, 4))}
    doc = {"rows": a.rows, "chunk_rows": chunk, "limit": LIMIT, "compression": a.compression,
           "cases": results,
           "shuffle_quality": q}
    print(json.dumps(doc, indent=1))
    if a.json:
        a.json.write_text(json.dumps(doc, indent=1))


if __name__ == "__main__":
    main()
