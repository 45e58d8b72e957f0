"""A real campaign over 10 and over 10,000 input files (issue 28, "Done when"): the same rows,
the real `gridml submit` (local executor, torch payload, 1 trial, 1 rank, 2 epochs) under
``ulimit -n 1024``, in a throwaway GRIDML_HOME. Reports per case the campaign's wall time, each
epoch's time, and the trial's time outside its epochs (finished - started - the epochs: the
payload's start, the check of its inputs, adapting the model, the end), so the figure the issue
asks for is the difference of that overhead between the two cases (goal: < 5 s).

The data: `gridml demo-data` (gzip + shuffle chunks, as users' files usually are) with
``--rows`` training rows in 10 files, the same rows re-cut into 10,000 files (``rows / 10,000``
rows each, the demo's chunking), and the same ``--val-rows`` validation rows in 10 files for
both; each set put with `gridml data put` (which records the files' layouts, as a campaign's
files are). ``--pages cold`` drops the training files' pages before each campaign.

    python benchmarks/many_files_campaign.py [--rows 200000] [--files 10,10000] [--json out.json]
                                             [--home DIR]   (DIR kept: a rerun reuses its data)
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
LIMIT = 1024


def gridml(home: Path, *args: str, limit: bool = False, timeout: float = 3600) -> str:
    env = {**os.environ, "GRIDML_HOME": str(home), "PYTHONPATH": str(ROOT)}
    env.pop("GRIDML_SERVER", None)
    proc = subprocess.run(
        [sys.executable, "-m", "gridml.cli", *args], capture_output=True, text=True, env=env,
        timeout=timeout, cwd=str(home),
        preexec_fn=(lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (LIMIT, LIMIT)))
        if limit else None)
    if proc.returncode:
        raise SystemExit(f"gridml {' '.join(args)} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")
    return proc.stdout


def recut(src: list[Path], out: Path, files: int) -> list[Path]:
    """The rows of ``src`` (demo files) in ``files`` files, written as the demo writes them."""
    import h5py
    import numpy as np

    xs, ys, names = [], [], None
    for p in src:
        with h5py.File(p, "r") as f:
            xs.append(f["x"][:])
            ys.append(f["y"][:])
            names = f["x"].attrs.get("features")
    x, y = np.concatenate(xs), np.concatenate(ys)
    out.mkdir(parents=True, exist_ok=True)
    edges = np.linspace(0, len(y), files + 1).astype(int)
    paths = []
    for i, (a, b) in enumerate(zip(edges, edges[1:])):
        p = out / f"train.{i:05d}.h5"
        with h5py.File(p, "w") as f:
            dx = f.create_dataset("x", data=x[a:b], chunks=(min(b - a, 4096), x.shape[1]),
                                  compression="gzip", compression_opts=4, shuffle=True)
            if names is not None:
                dx.attrs["features"] = names
            f.create_dataset("y", data=y[a:b], chunks=(min(b - a, 4096),), compression="gzip",
                             compression_opts=4, shuffle=True)
        paths.append(p)
    return paths


SPEC = """name: {name}
payload: {{framework: torch, model: {model}}}
data: {{train: "user.bench:train{files}", validation: "user.bench:val", features: x, labels: y}}
training: {{epochs: 2, batch_size: 256, loss: binary_crossentropy, metrics: [accuracy, auc], workers: 1}}
search:
  algorithm: random
  objective: val_loss
  max_trials: 1
  parallel: 1
  seed: 1
  space: {{learning_rate: {{type: real, low: 1.0e-3, high: 1.0e-2, log: true}}, units: {{type: int, low: 32, high: 33}}}}
resources: {{cores: 2, gpus: 0, memory_gb: 4, walltime: 1h, container: null}}
backend: {{executor: local, data: local, server: embedded}}
output: {{dataset: "user.bench:{name}.out"}}
"""


def phases(trial_dir: Path, started: str, epochs: list[float]) -> dict[str, float]:
    """Where the time outside the epochs went: the controller (the trial started -> its
    trial.json written: the campaign's stage-in, once per campaign, falls in the first trial's),
    the payload's start (its process started -> training begins) and its end (the last epoch's
    end -> its exit code written). From the files' times and the log (seconds: +-1 s)."""
    start = datetime.fromisoformat(started).timestamp()
    attempt = trial_dir / "attempt-1"
    pid_t = (attempt / "pid").stat().st_mtime
    lines = [ln for ln in (attempt / "payload.log").read_text().splitlines() if "] epoch " in ln]
    day = datetime.fromtimestamp(pid_t).date()

    def at(line: str) -> float:
        return datetime.combine(day, datetime.strptime(line[:8], "%H:%M:%S").time()).timestamp()

    first_end, last_end = at(lines[0]), at(lines[-1])
    return {"controller_s": round((trial_dir / "trial.json").stat().st_mtime - start, 1),
            "payload_start_s": round(first_end - epochs[0] - pid_t, 1),
            "payload_end_s": round((attempt / "exit_code").stat().st_mtime - last_end, 1)}


def drop_pages(paths: list[Path]) -> None:
    for p in paths:
        fd = os.open(p, os.O_RDONLY)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--val-rows", type=int, default=20_000)
    ap.add_argument("--files", default="10,10000")
    ap.add_argument("--pages", choices=("hot", "cold"), default="hot")
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--home", type=Path, default=None)
    a = ap.parse_args()
    home = a.home or Path(tempfile.mkdtemp(prefix="gridml-mfc-"))
    home.mkdir(parents=True, exist_ok=True)
    demo = home / "demo"
    done = home / "datasets.json"  # the datasets put by an earlier run with this home
    have: list[int] = json.loads(done.read_text()) if done.is_file() else []
    if not demo.is_dir():
        gridml(home, "demo-data", "--out", str(demo), "--n-train", str(a.rows), "--n-val",
               str(a.val_rows), "--files", "10", "--no-register")
        gridml(home, "data", "put", *map(str, sorted(demo.glob("*val*.h5"))), "--dataset",
               "user.bench:val")
    trains = sorted(demo.glob("*train*.h5"))
    results: list[dict[str, Any]] = []
    stamp = time.strftime("%H%M%S")
    for files in [int(f) for f in a.files.split(",")]:
        name = f"mf{files}-{stamp}"
        t = time.perf_counter()
        if files not in have:
            paths = trains if files == len(trains) else recut(trains, home / f"f{files}", files)
            gridml(home, "data", "put", *map(str, paths), "--dataset", f"user.bench:train{files}")
            done.write_text(json.dumps(have := have + [files]))
        put_s = time.perf_counter() - t
        spec = home / f"{name}.yaml"
        spec.write_text(SPEC.format(name=name, files=files,
                                    model=ROOT / "examples" / "models" / "deepsets_torch.py"))
        if a.pages == "cold":
            drop_pages(sorted((home / "store").rglob("*.h5")))
        t = time.perf_counter()
        gridml(home, "submit", str(spec), limit=True)
        wall = time.perf_counter() - t
        doc = json.loads(gridml(home, "status", name, "--trial", "0", "--json"))
        trial, epochs = doc["trial"], doc["epochs"]
        span = (datetime.fromisoformat(trial["finished"])
                - datetime.fromisoformat(trial["started"])).total_seconds()
        ep = [e["epoch_time"] for e in epochs]
        parts = phases(home / "runs" / name / "trial-0000", trial["started"], ep)
        r = {"files": files, "state": trial["state"], "campaign_s": round(wall, 1),
             "trial_s": round(span, 1), "epoch_s": [round(v, 1) for v in ep],
             "outside_epochs_s": round(span - sum(ep), 1), **parts,
             "input_wait": [e["input_wait_frac"] for e in epochs],
             "val_loss": trial["objective"], "put_s": round(put_s, 1),
             "load_avg": round(os.getloadavg()[0], 1)}
        results.append(r)
        print(json.dumps(r), flush=True)
    ref = results[0]
    for r in results:
        r["outside_epochs_over_ref_s"] = round(r["outside_epochs_s"] - ref["outside_epochs_s"], 1)
        r["epoch1_vs_ref"] = round(ref["epoch_s"][0] / r["epoch_s"][0], 2)
    doc = {"rows": a.rows, "val_rows": a.val_rows, "limit": LIMIT, "pages": a.pages,
           "cases": results}
    print(json.dumps(doc, indent=1))
    if a.json:
        a.json.write_text(json.dumps(doc, indent=1))


if __name__ == "__main__":
    main()
