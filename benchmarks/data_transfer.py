"""Upload / download throughput: the local store vs a real Rucio server, side by side in one run.

    .venv/bin/python benchmarks/data_transfer.py [--files 10] [--size-mb 1] [--big-mb 32]

Starts its own Rucio server (scripts/rucio-server.sh, loopback, SQLite, POSIX RSE) and reports
what starting it costs, then for each case (many small files; one big file) uploads the same files
into a new dataset of each backend and downloads them into an empty folder (adler32 verified), and
a second, already-present download (reuse). Prints MB/s and the local/Rucio ratios.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "rucio"))
sys.path.insert(0, str(ROOT))


def _files(folder: Path, n: int, size: int) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    out = []
    for i in range(n):
        p = folder / f"f{i}.{uuid.uuid4().hex[:6]}.bin"
        p.write_bytes(os.urandom(size))
        out.append(p)
    return out


def _timed(fn) -> float:  # type: ignore[no-untyped-def]
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def measure(dm, scope: str, files: list[Path], work: Path) -> dict[str, float]:  # type: ignore[no-untyped-def]
    """Seconds for upload, first download, and a download where every file is already there."""
    ds = f"{scope}:bench.{uuid.uuid4().hex[:8]}"
    dest = work / f"dl-{uuid.uuid4().hex[:6]}"
    return {"upload": _timed(lambda: dm.upload(files, ds)),
            "download": _timed(lambda: dm.download(ds, dest)),
            "reuse": _timed(lambda: dm.download(ds, dest))}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", type=int, default=10)
    ap.add_argument("--size-mb", type=float, default=1.0)
    ap.add_argument("--big-mb", type=float, default=32.0)
    args = ap.parse_args()
    from rucio_harness import install_seconds, remove_server, start_server

    with tempfile.TemporaryDirectory(prefix="gridml-bench-") as tmp:
        work = Path(tmp)
        os.environ["GRIDML_HOME"] = str(work / "home")
        inst = install_seconds()
        server = start_server(work / "rucio")
        try:
            first = server.start_seconds
            os.environ.update(server.env)
            stop_s = _timed(server.stop)
            server.start()
            print(f"Rucio server: install {inst:.1f} s (~0 when cached), first start (schema, "
                  f"accounts) {first:.1f} s, stop {stop_s:.1f} s, "
                  f"restart {server.start_seconds:.1f} s")
            run_cases(args, work, server)
        finally:
            remove_server(server)


def run_cases(args: argparse.Namespace, work: Path, server) -> None:  # type: ignore[no-untyped-def]
    from gridml.data.local import LocalStore
    from gridml.data.rucio import RucioStore

    local, rucio = LocalStore(work / "store"), RucioStore()
    cases = [(args.files, int(args.size_mb * 2**20)), (1, int(args.big_mb * 2**20))]
    print(f"{'case':<16}{'op':<10}{'local MB/s':>12}{'rucio MB/s':>12}{'local/rucio':>13}")
    for n, size in cases:
        files = _files(work / f"src-{n}-{size}", n, size)
        mb = n * size / 1e6
        lo = measure(local, "user.bench", files, work)
        ru = measure(rucio, server.info["scope"], files, work)
        for op in ("upload", "download", "reuse"):
            print(f"{f'{n} x {size / 2**20:g} MiB':<16}{op:<10}{mb / lo[op]:>12.1f}"
                  f"{mb / ru[op]:>12.1f}{ru[op] / lo[op]:>12.1f}x")


if __name__ == "__main__":
    main()
