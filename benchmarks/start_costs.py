"""What a process costs before and around its work: CPU seconds, side by side in one run.

    .venv/bin/python benchmarks/start_costs.py [--repeat 3] [--skip-keras]

Trials are short on a login node, in a quick campaign and in the test suite, so the fixed cost of
each process counts. Every figure is CPU seconds (user + system, from ``getrusage`` of the
children), the median of ``--repeat`` runs, next to its raw limit:

* **The CLI.** ``python -c pass`` (the interpreter), ``gridml --help``; ``gridml status`` of a
  study with 8 finished trials the first time (the fANOVA importance computed) and again (read
  from ``runs/<study>/importance.json``), ``gridml status --trial 0`` and ``gridml best`` (no
  importance); ``gridml steer`` (a bayes batch from 3 told points).
* **A one-rank Keras trial** (2 epochs of 800 rows, a two-layer MLP like examples/models/mlp.py): importing TensorFlow
  and Horovod and nothing else (the raw limit); the way users write it (a script: hvd.init,
  ``hvd.DistributedOptimizer``, ``model.fit`` on arrays, Horovod's allreduce traced with
  AutoGraph, as Horovod does by default); the same script with the allreduce traced without
  AutoGraph (``payloads.runtime.session._plain_graph_allreduce``, what the payload does); and the
  payload itself (``python -m payloads.train_keras``: the same training plus its reports, input
  pipeline, model.keras, model.onnx checked with onnxruntime, curves.png, provenance).
* **Horovod's launcher**, two ranks that only sleep for a second (``--gloo``): ``python -m
  payloads.hvdrun`` (what gridml runs: horovodrun's code, its build probe asked of Horovod's
  TensorFlow library) against ``horovodrun`` as users run it (its probe imports all of
  TensorFlow in a forked child), next to the two sleeping ranks alone (the raw limit).

Bounded: about three and a half minutes with --repeat 3.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples"))

SPACE = {"lr": {"type": "real", "low": 1e-4, "high": 1e-1, "log": True},
         "units": {"type": "int", "low": 8, "high": 64}}

USER_SCRIPT = textwrap.dedent("""
    import sys
    import h5py, numpy as np
    import tensorflow as tf
    import horovod.tensorflow.keras as hvd

    hvd.init()
    def read(paths):
        xs, ys = [], []
        for p in paths:
            with h5py.File(p) as f:
                xs.append(f["x"][:]); ys.append(f["y"][:])
        return np.concatenate(xs), np.concatenate(ys)
    train, val = sys.argv[1].split(","), sys.argv[2].split(",")
    x, y = read(train); vx, vy = read(val)
    model = tf.keras.Sequential([tf.keras.Input(x.shape[1:]),
                                 tf.keras.layers.Dense(16, activation="relu"),
                                 tf.keras.layers.Dropout(0.1),
                                 tf.keras.layers.Dense(16, activation="relu"),
                                 tf.keras.layers.Dropout(0.1),
                                 tf.keras.layers.Dense(1, activation="sigmoid")])
    opt = hvd.DistributedOptimizer(tf.keras.optimizers.legacy.Adam(0.003))
    if sys.argv[3] == "plain":
        from payloads.runtime.session import _plain_graph_allreduce
        _plain_graph_allreduce(opt)
    model.compile(optimizer=opt, loss="binary_crossentropy",
                  metrics=["accuracy", tf.keras.metrics.AUC(name="auc")])
    model.fit(x, y, batch_size=128, epochs=2, validation_data=(vx, vy), verbose=0,
              callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0)])
""")


def cpu_of(cmd: list[str], env: dict[str, str], cwd: Path) -> float:
    """CPU seconds (user + system) of ``cmd`` and every process it waited for."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, timeout=900)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:4])}... failed: {proc.stderr[-2000:]}")
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def median_cpu(cmd: list[str], env: dict[str, str], cwd: Path, repeat: int,
               before_each: Callable[[], None] | None = None) -> float:
    runs = []
    for _ in range(repeat):
        if before_each is not None:
            before_each()
        runs.append(cpu_of(cmd, env, cwd))
    return statistics.median(runs)


def base_env(home: Path) -> dict[str, str]:
    env = dict(os.environ)
    prefix = Path(sys.prefix)
    env["PATH"] = f"{prefix / 'bin'}:{env.get('PATH', '')}"
    env["LD_LIBRARY_PATH"] = f"{prefix / 'lib'}:{env.get('LD_LIBRARY_PATH', '')}"
    env["PYTHONPATH"] = f"{ROOT}:{env.get('PYTHONPATH', '')}"
    env["GRIDML_HOME"] = str(home)
    env["TF_CPP_MIN_LOG_LEVEL"] = "2"
    return env


def seed_study(home: Path, env: dict[str, str]) -> None:
    """A study of 8 finished trials in ``home``'s store, as a campaign leaves it."""
    code = textwrap.dedent(f"""
        import numpy as np
        from gridml.settings import settings
        from gridml.store import open_store
        from gridml.store.records import EpochReport
        store = open_store(settings().db_url)
        search = {{"algorithm": "random", "objective": "val_loss", "direction": "minimize",
                   "seed": 1, "max_trials": 8, "space": {SPACE!r}}}
        study = store.create_study("bench", {{"search": search}}, "bench")
        rng = np.random.default_rng(0)
        for _ in range(8):
            p = {{"lr": float(10 ** rng.uniform(-4, -1)), "units": int(rng.integers(8, 65))}}
            v = (np.log10(p["lr"]) + 2.5) ** 2 + 0.001 * p["units"]
            t = store.create_trial(study.id, p)
            store.record_epoch(t.id, EpochReport(1, {{"val_loss": float(v)}}, 1.0))
            store.update_trial(t.id, state="completed", objective=float(v))
        store.close()
    """)
    subprocess.run([sys.executable, "-c", code], env=env, check=True, cwd=home)


def cli_rows(tmp: Path, repeat: int) -> list[tuple[str, float, str]]:
    home = tmp / "home"
    home.mkdir()
    env = base_env(home)
    seed_study(home, env)
    gridml = [sys.executable, "-m", "gridml.cli"]
    cache = home / "runs" / "bench" / "importance.json"
    steer_in = tmp / "steer.json"
    steer_in.write_text(json.dumps({"points": [[{"lr": 0.01, "units": 32}, 0.5],
                                               [{"lr": 0.001, "units": 8}, 0.4],
                                               [{"lr": 0.05, "units": 60}, None]],
                                    "opt_space": SPACE}))
    raw = median_cpu([sys.executable, "-c", "pass"], env, tmp, repeat)
    rows = [("python -c pass", raw, "the raw limit")]
    rows.append(("gridml --help", median_cpu([*gridml, "--help"], env, tmp, repeat), ""))
    rows.append(("gridml status (importance computed)",
                 median_cpu([*gridml, "status", "bench"], env, tmp, repeat,
                            before_each=lambda: cache.unlink(missing_ok=True)),
                 "what every status call cost before the cache"))
    rows.append(("gridml status (importance kept)",
                 median_cpu([*gridml, "status", "bench"], env, tmp, repeat), ""))
    rows.append(("gridml status --trial 0",
                 median_cpu([*gridml, "status", "bench", "--trial", "0"], env, tmp, repeat), ""))
    rows.append(("gridml best", median_cpu([*gridml, "best", "bench"], env, tmp, repeat), ""))
    rows.append(("gridml steer (bayes, 3 told)",
                 median_cpu([*gridml, "steer", "--in", str(steer_in), "--out", str(tmp / "o.json"),
                             "--num-points", "2", "--max-points", "10"], env, tmp, repeat), ""))
    return rows


def keras_rows(tmp: Path, repeat: int) -> list[tuple[str, float, str]]:
    from make_sample_data import make_sample_data

    env = base_env(tmp / "home-k")
    # one rank with no launcher: Horovod's Gloo controller in one process, as the payload sets
    # for itself (train_keras.single_process_horovod); its MPI singleton needs OpenMPI's orted
    env.update(HOROVOD_CONTROLLER="gloo", HOROVOD_CPU_OPERATIONS="gloo")
    train, val = make_sample_data(tmp / "data", n_train=800, n_val=300, n_files=2)
    trial = tmp / "trial.json"
    trial.write_text(json.dumps({
        "version": 1, "study": "bench", "study_id": 1, "trial_id": 1, "trial_number": 0,
        "hparams": {"learning_rate": 0.003, "units": 16, "dropout": 0.1, "activation": "relu"},
        "model_file": str(ROOT / "examples/models/mlp.py"),
        "training": {"epochs": 2, "batch_size": 128, "loss": "binary_crossentropy",
                     "metrics": ["accuracy", "auc"], "optimizer": "adam"},
        "data": {"features": "x", "labels": "y", "train": [str(p) for p in train],
                 "validation": [str(p) for p in val]},
        "output_dir": str(tmp / "outputs"), "seed": 42, "resources": {"cores": 1, "gpus": 0},
        "api": None, "heartbeat_s": 30, "early_stopping": False,
        "provenance": {"spec": {"name": "bench"}, "git": "bench"}}))
    script = tmp / "user_keras.py"
    script.write_text(USER_SCRIPT)
    files = [",".join(map(str, train)), ",".join(map(str, val))]
    outputs = tmp / "outputs"

    def fresh() -> None:  # the payload resumes a finished trial: start each run from nothing
        shutil.rmtree(outputs, ignore_errors=True)

    raw = median_cpu([sys.executable, "-c", "import tensorflow, horovod.tensorflow.keras"],
                     env, tmp, repeat)
    rows = [("import tensorflow + horovod", raw, "the raw limit")]
    rows.append(("user script, allreduce with AutoGraph",
                 median_cpu([sys.executable, str(script), *files, "autograph"], env, tmp, repeat),
                 "as users write it (Horovod's default)"))
    rows.append(("user script, allreduce without AutoGraph",
                 median_cpu([sys.executable, str(script), *files, "plain"], env, tmp, repeat),
                 "the payload's trace"))
    rows.append(("payloads.train_keras (everything)",
                 median_cpu([sys.executable, "-m", "payloads.train_keras", str(trial)], env, tmp,
                            repeat, before_each=fresh),
                 "+ reports, pipeline, model.keras, ONNX, curves"))
    return rows


def launcher_rows(tmp: Path, repeat: int) -> list[tuple[str, float, str]]:
    env = base_env(tmp / "home-l")
    ranks = [sys.executable, "-c", "import time; time.sleep(1)"]
    args = ["-np", "2", "-H", "localhost:2", "--gloo", *ranks]
    raw = median_cpu([sys.executable, "-c", "import subprocess, sys; "
                      "[p.wait() for p in [subprocess.Popen(sys.argv[1:]) for _ in range(2)]]",
                      *ranks], env, tmp, repeat)
    horovodrun = shutil.which("horovodrun", path=env["PATH"]) or "horovodrun"
    return [("two sleeping ranks, no launcher", raw, "the raw limit"),
            ("python -m payloads.hvdrun --gloo",
             median_cpu([sys.executable, "-m", "payloads.hvdrun", *args], env, tmp, repeat),
             "what gridml runs"),
            ("horovodrun --gloo", median_cpu([horovodrun, *args], env, tmp, repeat),
             "as users run it")]


def table(title: str, rows: list[tuple[str, float, str]]) -> None:
    base = rows[0][1]
    print(f"\n{title}")
    print(f"{'process':44s} {'CPU s':>7s} {'x raw':>7s}  note")
    for name, cpu, note in rows:
        print(f"{name:44s} {cpu:7.2f} {cpu / base:7.1f}  {note}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--skip-keras", action="store_true", help="only the CLI rows")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="gridml-start-") as d:
        tmp = Path(d)
        table("the CLI (a study of 8 finished trials)", cli_rows(tmp, args.repeat))
        if not args.skip_keras:
            table("a one-rank Keras trial, 2 epochs of 800 rows", keras_rows(tmp, args.repeat))
            table("Horovod's launcher, two ranks that sleep 1 s", launcher_rows(tmp, args.repeat))


if __name__ == "__main__":
    main()
