"""Metrics API throughput: sustained epoch reports/s and latency, gridml vs MLflow, in one run.

    .venv/bin/python benchmarks/metrics_api.py [--seconds 20] [--trials 64] [--workers 2]

64 simulated trials (one keep-alive connection each) post epoch reports back to back for
``--seconds`` (after a 2 s warm-up), against, in turn:
  1. `gridml serve` on SQLite            (WAL, synchronous=NORMAL, one file)
  2. `gridml serve` on PostgreSQL        (throwaway server from scripts/postgres.sh)
  3. an MLflow tracking server           (`mlflow server`), the peer, on three backends:
     a. SQLite as MLflow sets it up       (its defaults: rollback journal, synchronous=FULL)
     b. SQLite in WAL mode                (journal_mode=WAL and synchronous=NORMAL on every
                                           connection, as gridml's store sets them)
     c. PostgreSQL                        (a new database on the same throwaway server as 2.)
     one report = one log-batch call with the same four metrics; its 4 uvicorn workers
     (defaults) get 120 s instead of 5 s to answer uvicorn's health check (start-up only:
     under this machine's load the workers were killed while still importing).
The ratios printed pair like with like (gridml SQLite vs MLflow SQLite WAL, PostgreSQL vs
PostgreSQL) beside the ratios to MLflow's defaults. Every run's reports are then counted in the
database, trial by trial: each report the server acknowledged (warm-up included) must be
stored exactly once (MLflow: its four metric rows), one that got no reply once or not at all,
nothing else; the run fails loudly otherwise (``check_stored``). The big study (below) is
counted after its fill and is not counted in the runs.
The load generator runs in its own process (asyncio, raw HTTP/1.1, so that it costs the server
as little CPU as possible on this 2-core machine). MLflow and psycopg2 (requirements/bench.txt)
are installed by this script into their own venv under ~/.cache/gridml/bench-mlflow (first run:
a few minutes).
Goal (issue 4): >= 2,000 reports/s with p99 < 50 ms, and ahead of the peer.

Each gridml target runs twice: on an empty store, then on the same store after a study of
``--big-trials`` (10,000) x ``--big-epochs`` (20) reports was bulk-inserted beside it
(``metrics_api_big.py``): the rate and p99 must stay within 20 % of the empty-store run. On the
big store the dashboard's study page for that study is then timed: the API calls it makes, and
in headless Chromium (Debian's chromium + chromedriver) from navigation to its table filled
(goal: < 2 s; ``--no-browser`` leaves Chromium out). ``--big-trials 0`` skips that half.

Quick run (issue 22; 2 shared cores, load average 13-15 from other jobs, so the absolute rates
are far below a quiet machine's; the ratios are side by side in one run):
    metrics_api.py --seconds 5 --trials 16 --big-trials 1000 --big-epochs 5 --no-browser
| target | reports/s | p50 ms | p99 ms | server CPU ms/report | stored (all checked) |
|---|---|---|---|---|---|
| gridml serve, SQLite, empty | 107 | 146 | 273 | 1.56 | 656 |
| gridml serve, SQLite, + 1k x 5 study | 341 | 33 | 155 | 1.02 | 1,838 |
| gridml serve, PostgreSQL, empty | 342 | 45 | 92 | 1.02 | 2,127 |
| gridml serve, PostgreSQL, + 1k x 5 study | 123 | 125 | 215 | 2.12 | 823 |
| MLflow server, SQLite (defaults) | 1 | 4,498 | 7,995 | 410 | 22 |
| MLflow server, SQLite (WAL, synchronous=NORMAL) | 6 | 2,964 | 7,066 | 156 | 48 |
| MLflow server, PostgreSQL | 0 (no report timed) | - | - | - | 16 |

Ratios that remain, gridml / MLflow rate: SQLite WAL vs SQLite WAL 18-57x (before issue 22
only MLflow's defaults were measured: roughly 100-340x in this run (its rate rounds to
1/s), 44-100x in the 20 s runs of
docs/server.md); PostgreSQL vs PostgreSQL: not measurable in 5 s (MLflow's first report per
trial took longer than the whole window, and its 16 reports were all stored). At 5 s on this
load MLflow's figures are dominated by its slow first requests: a 20 s run on a quieter
machine gives the figures to quote. Every run's acknowledged reports were found stored once.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
MLFLOW_ENV = Path.home() / ".cache" / "gridml" / "bench-mlflow"
WARMUP = 2.0


# ---------------------------------------------------------------------------------------------
# load generator (runs as `metrics_api.py --generate PLAN.json`, in its own process)
# ---------------------------------------------------------------------------------------------
def _request(plan: dict[str, Any], trial: dict[str, Any], epoch: int) -> bytes:
    metrics = {"loss": 1.0 / epoch, "val_loss": 1.1 / epoch, "accuracy": 1 - 0.5 / epoch,
               "val_accuracy": 1 - 0.6 / epoch}
    if plan["kind"] == "mlflow":
        now = int(time.time() * 1000)
        path = "/api/2.0/mlflow/runs/log-batch"
        body = {"run_id": trial["run_id"], "metrics": [
            {"key": k, "value": v, "timestamp": now, "step": epoch} for k, v in metrics.items()]}
        auth = ""
    else:
        path = f"/api/v1/trials/{trial['id']}/epochs"
        body = {"epoch": epoch, "metrics": metrics, "epoch_time": 2.5, "samples_per_s": 8000.0,
                "input_wait_frac": 0.03, "peak_rss_mb": 900.0, "threads": 12, "extra": {}}
        auth = f"Authorization: Bearer {trial['token']}\r\n"
    data = json.dumps(body).encode()
    head = (f"POST {path} HTTP/1.1\r\nHost: {plan['host']}\r\n{auth}"
            f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n")
    return head.encode() + data


async def _read_reply(reader: asyncio.StreamReader) -> int:
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":", 1)[1])
    if length:
        await reader.readexactly(length)
    return status


async def _one_trial(plan: dict[str, Any], trial: dict[str, Any], stop_at: float,
                     measure_from: float, out: dict[str, Any]) -> None:
    host, port = plan["host"].split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    epoch = 0
    acked: list[int] = []  # epochs the server answered 2xx to (warm-up included)
    unanswered: list[int] = []  # no reply (connection lost): stored or not, either is fair
    while time.perf_counter() < stop_at:
        epoch += 1
        start = time.perf_counter()
        writer.write(_request(plan, trial, epoch))
        try:
            status = await _read_reply(reader)
        except (asyncio.IncompleteReadError, ConnectionError):
            out["errors"] += 1
            unanswered.append(epoch)
            writer.close()
            reader, writer = await asyncio.open_connection(host, int(port))
            continue
        end = time.perf_counter()
        if status < 300:
            acked.append(epoch)
        if start >= measure_from:
            out["lat"].append(end - start)
            if status >= 300:
                out["errors"] += 1
    writer.close()
    out["acked"][trial["key"]] = acked
    out["unanswered"][trial["key"]] = unanswered


async def _generate(plan: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"lat": [], "errors": 0, "acked": {}, "unanswered": {}}
    now = time.perf_counter()
    measure_from, stop_at = now + WARMUP, now + WARMUP + plan["seconds"]
    await asyncio.gather(*(_one_trial(plan, t, stop_at, measure_from, out)
                           for t in plan["trials"]))
    lat = sorted(out["lat"])

    def pct(q: float) -> float:
        return 1000 * lat[min(len(lat) - 1, int(q * len(lat)))] if lat else float("nan")

    return {"reports": len(lat), "seconds": plan["seconds"], "rate": len(lat) / plan["seconds"],
            "p50_ms": pct(0.50), "p99_ms": pct(0.99), "errors": out["errors"],
            "gen_cpu_s": time.process_time(), "acked": out["acked"],
            "unanswered": out["unanswered"]}


def generate_main(plan_file: str) -> None:
    plan = json.loads(Path(plan_file).read_text())
    try:
        import uvloop  # the generator should cost the machine as little as possible

        uvloop.install()
    except ImportError:
        pass
    print(json.dumps(asyncio.run(_generate(plan))))


def run_load(plan: dict[str, Any], workdir: Path, server_pid: int) -> dict[str, Any]:
    """The load generator in its own process; returns its measurement, with the CPU time the
    server used per report (a figure the other load on a shared machine does not distort)."""
    plan_file = workdir / f"plan-{plan['kind']}.json"
    plan_file.write_text(json.dumps(plan))
    before = _cpu_seconds(server_pid)
    done = subprocess.run([sys.executable, __file__, "--generate", str(plan_file)],
                          capture_output=True, text=True, timeout=plan["seconds"] + 120,
                          check=False)
    if done.returncode != 0:
        raise RuntimeError(f"load generator failed: {done.stderr[-2000:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    total = result["reports"] * (1 + WARMUP / plan["seconds"])  # CPU counted over warm-up too
    result["server_cpu_ms"] = 1000 * (_cpu_seconds(server_pid) - before) / max(total, 1)
    result["gen_cpu_ms"] = 1000 * result.pop("gen_cpu_s") / max(total, 1)
    return result


def _cpu_seconds(pid: int) -> float:
    """user + system CPU seconds of a process and all its children (uvicorn workers)."""
    import psutil

    root = psutil.Process(pid)
    total = 0.0
    for proc in [root, *root.children(recursive=True)]:
        try:
            times = proc.cpu_times()
            total += times.user + times.system
        except psutil.NoSuchProcess:
            pass
    return total


# ---------------------------------------------------------------------------------------------
# targets
# ---------------------------------------------------------------------------------------------
def _fill_gridml(db_url: str, n: int, name: str = "bench") -> list[dict[str, Any]]:
    """A study with ``n`` running trials, each with its own trial token (as payloads have)."""
    from gridml.store import open_store

    store = open_store(db_url)
    study = store.create_study(name, {"search": {"objective": "val_loss", "space": {}}}, "b")
    trials = []
    for i in range(n):
        trial = store.create_trial(study.id, {"i": i}, state="running")
        trials.append({"id": trial.id, "token": trial.token, "key": str(trial.id)})
    store.close()
    return trials


def bench_gridml(label: str, db_url: str, args: argparse.Namespace,
                 workdir: Path) -> list[dict[str, Any]]:
    """The load on an empty store, then (``--big-trials``) on the same store holding a big
    study too, with the dashboard timed on that study; one row per run."""
    from gridml.server.process import ServerProcess
    from metrics_api_big import PAGE, dashboard_api_times, dashboard_browser_time, fill_big_study

    rows = []
    for big in ([False, True] if args.big_trials else [False]):
        if big:
            fill_s = fill_big_study(db_url, args.big_trials, args.big_epochs)
            print(f"{label}: {args.big_trials} x {args.big_epochs} reports inserted in "
                  f"{fill_s:.1f} s", flush=True)
        trials = _fill_gridml(db_url, args.trials, name="bench-big" if big else "bench")
        store = f"+ {args.big_trials:,} x {args.big_epochs} study" if big else "empty"
        with ServerProcess(db_url, workers=args.workers, log=workdir / f"{label}.log") as server:
            plan = {"kind": "gridml", "host": server.url.removeprefix("http://"),
                    "seconds": args.seconds, "trials": trials}
            result = run_load(plan, workdir, server.proc.pid)
            check_stored(f"{label}, {store}", stored_gridml(db_url, trials), result)
            if big:
                result["dashboard"] = dashboard_api_times(server.url)
                # the table's first page: a smaller big study fills fewer rows
                result["browser_s"] = (dashboard_browser_time(
                    server.url, rows=min(PAGE, args.big_trials)) if args.browser else None)
        rows.append({"target": f"{label}, {store}", **result})
    return rows


def stored_gridml(db_url: str, trials: list[dict[str, Any]]) -> dict[str, list[int]]:
    """The epochs stored for each of ``trials`` (one entry per row: a duplicate shows twice);
    the other studies in the store (the big one) are not counted."""
    from sqlalchemy import text

    from gridml.store import open_store

    store = open_store(db_url)
    ids = {t["id"] for t in trials}
    stored: dict[str, list[int]] = {t["key"]: [] for t in trials}
    with store.engine.connect() as conn:
        for trial_id, epoch in conn.execute(text("SELECT trial_id, epoch FROM epochs")):
            if trial_id in ids:
                stored[str(trial_id)].append(epoch)
    store.close()
    return stored


def check_stored(label: str, stored: dict[str, list[int]], result: dict[str, Any],
                 per_report: int = 1) -> None:
    """Every report a server acknowledged (2xx, warm-up included) is stored exactly once
    (``per_report`` rows: MLflow keeps one row per metric), for every trial of the run; a
    report that got no reply (connection lost) may be stored once or not at all; nothing else
    is stored. Raises with the first offenders otherwise. Pops the per-trial lists from
    ``result`` and leaves the counts there."""
    from collections import Counter

    acked, unanswered = result.pop("acked"), result.pop("unanswered")
    missing, duplicated, unexpected = [], [], []
    total = 0
    for key, epochs in acked.items():
        counts = Counter(stored.get(key, []))
        total += sum(counts.values())
        loose, sent = set(unanswered.get(key, [])), set(epochs)
        for epoch in epochs:
            if counts[epoch] < per_report:
                missing.append((key, epoch, counts[epoch]))
        for epoch, n in counts.items():
            if n > per_report:
                duplicated.append((key, epoch, n))
            elif epoch not in loose and epoch not in sent:
                unexpected.append((key, epoch, n))
    result["acked_total"] = sum(len(v) for v in acked.values())
    result["stored"] = total // per_report
    if missing or duplicated or unexpected or set(stored) - set(acked):
        raise RuntimeError(
            f"{label}: stored reports do not match the acknowledged ones: "
            f"{result['acked_total']} acknowledged, {total} rows stored "
            f"({per_report} per report); {len(missing)} missing, first {missing[:5]}; "
            f"{len(duplicated)} duplicated, first {duplicated[:5]}; {len(unexpected)} stored "
            f"but never sent/answered, first {unexpected[:5]}; trials without a load: "
            f"{sorted(set(stored) - set(acked))[:5]}")
    print(f"{label}: all {result['acked_total']} acknowledged reports stored once "
          f"({sum(len(v) for v in unanswered.values())} unanswered)", flush=True)


def postgres_db(workdir: Path) -> str:
    from tests import pg as testing

    base = testing.postgres_url()
    if base is None:
        raise RuntimeError("no PostgreSQL: scripts/postgres.sh could not start one")
    return testing.create_database(base)


def ensure_mlflow() -> Path:
    """MLflow (and psycopg2, its PostgreSQL driver) in its own venv, as requirements/bench.txt
    lists them (MLflow pins packages gridml's environment must not get); reinstalled when that
    file changes."""
    import hashlib

    python = MLFLOW_ENV / "bin" / "python"
    reqs = ROOT / "requirements" / "bench.txt"
    marker = MLFLOW_ENV / ".installed"
    digest = hashlib.sha256(reqs.read_bytes()).hexdigest()
    if not marker.exists() or marker.read_text().strip() != digest:
        print(f"installing {reqs.name} into {MLFLOW_ENV} (first run only) ...", flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(MLFLOW_ENV)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", "-r", str(reqs)], check=True)
        marker.write_text(digest)
    return MLFLOW_ENV / "bin" / "mlflow"


# SQLite connection pragmas for MLflow's WAL target, set on every connection its server (and
# each of its uvicorn workers) opens: the two gridml.store.sql.engine sets. Loaded through
# PYTHONPATH as sitecustomize, in the MLflow server's processes only.
_SITECUSTOMIZE = """
import os
if os.environ.get("GRIDML_BENCH_SQLITE_WAL") == "1":
    from sqlalchemy import event
    from sqlalchemy.engine import Engine

    @event.listens_for(Engine, "connect")
    def _gridml_bench_wal(dbapi_conn, _record):
        if type(dbapi_conn).__module__.startswith("sqlite3"):
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA synchronous=NORMAL")
            cur.close()
"""

MLFLOW_TARGETS = {  # --skip name: label
    "mlflow-sqlite": "MLflow server (SQLite, defaults)",
    "mlflow-wal": "MLflow server (SQLite, WAL)",
    "mlflow-postgresql": "MLflow server (PostgreSQL)",
}


def bench_mlflow(target: str, args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    """One MLflow tracking server on ``target``'s backend: SQLite as MLflow sets it up (its
    rollback journal, synchronous=FULL), SQLite with WAL and synchronous=NORMAL as gridml's
    store sets it, or a new database on the same throwaway PostgreSQL server as gridml's row."""
    import httpx

    from gridml.server.process import free_port

    mlflow = ensure_mlflow()
    env = dict(os.environ)
    name = target.removeprefix("mlflow-")
    if name == "postgresql":
        backend = postgres_db(workdir)
        for prefix in ("postgresql://", "postgresql+psycopg://", "postgres://"):
            if backend.startswith(prefix):  # psycopg2, in MLflow's venv (SQLAlchemy 2.1's
                backend = "postgresql+psycopg2://" + backend.removeprefix(prefix)  # default:
                break                                                          # psycopg 3)
    else:
        db = workdir / f"mlflow-{name}.db"
        backend = f"sqlite:///{db}"
        if name == "wal":
            import sqlite3

            with sqlite3.connect(db) as conn:  # persistent in the file, before MLflow's schema
                conn.execute("PRAGMA journal_mode=WAL")
            site = workdir / "mlflow-site"
            site.mkdir(exist_ok=True)
            (site / "sitecustomize.py").write_text(_SITECUSTOMIZE)
            env["PYTHONPATH"] = str(site)
            env["GRIDML_BENCH_SQLITE_WAL"] = "1"
    port = free_port()
    log_file = workdir / f"mlflow-{name}.log"
    with open(log_file, "wb") as log:  # the server keeps its own copy
        proc = subprocess.Popen([str(mlflow), "server", "--backend-store-uri", backend,
                                 "--default-artifact-root", str(workdir / "mlruns"),
                                 "--host", "127.0.0.1", "--port", str(port),
                                 # uvicorn kills a worker that has not answered its health
                                 # check within 5 s: on the busy 2 cores MLflow's workers,
                                 # still importing, were killed and restarted for minutes
                                 "--uvicorn-opts", "--timeout-worker-healthcheck 120"],
                                stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True, env=env)
    url = f"http://127.0.0.1:{port}"
    label = MLFLOW_TARGETS[target]
    try:
        _wait_http(f"{url}/health", proc, 300, log_file)
        with httpx.Client(base_url=url, timeout=60) as http:
            exp = http.post("/api/2.0/mlflow/experiments/create", json={"name": "bench"}).json()
            runs = [http.post("/api/2.0/mlflow/runs/create", json={
                "experiment_id": exp["experiment_id"], "run_name": f"trial-{i}",
                "start_time": int(time.time() * 1000)}).json()["run"]["info"]["run_id"]
                for i in range(args.trials)]
            _settle(http, runs[0])
        plan = {"kind": "mlflow", "host": f"127.0.0.1:{port}", "seconds": args.seconds,
                "trials": [{"run_id": r, "key": r} for r in runs]}
        result = run_load(plan, workdir, proc.pid)
    finally:
        _stop_group(proc)
    check_stored(label, stored_mlflow(backend, runs), result, per_report=4)
    if name == "wal":
        import sqlite3

        with sqlite3.connect(db) as conn:
            mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
        if mode != "wal":
            raise RuntimeError(f"{label}: the database ended in journal mode {mode!r}")
    return {"target": label, **result}


def stored_mlflow(backend: str, runs: list[str]) -> dict[str, list[int]]:
    """The steps MLflow stored for each run, one entry per metric row of the four reported
    metrics (MLflow's ``metrics`` table; the settling probes are another key)."""
    import sqlalchemy as sa

    from gridml.store.sql.engine import normalise_url

    engine = sa.create_engine(normalise_url(backend.replace("+psycopg2://", "://", 1)))
    wanted = set(runs)
    stored: dict[str, list[int]] = {r: [] for r in runs}
    try:
        with engine.connect() as conn:
            for run, step in conn.execute(sa.text(
                    "SELECT run_uuid, step FROM metrics WHERE key IN "
                    "('loss', 'val_loss', 'accuracy', 'val_accuracy')")):
                if run in wanted:
                    stored[run].append(int(step))
    finally:
        engine.dispose()
    return stored


def _stop_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM the server's process group, then SIGKILL what is left of it (MLflow's job
    runner leaves its consumers behind otherwise)."""
    for sig, wait in ((15, 20), (9, 10)):
        try:
            os.killpg(proc.pid, sig)
            proc.wait(wait)
        except (subprocess.TimeoutExpired, ProcessLookupError):
            pass


def _settle(http: Any, run_id: str) -> None:
    """MLflow's 4 uvicorn workers boot one after the other, long after /health answers: post
    until 16 log-batch calls in a row succeed, so that start-up is not in the measurement."""
    ok, deadline = 0, time.monotonic() + 300
    while ok < 16 and time.monotonic() < deadline:
        body = {"run_id": run_id, "metrics": [{"key": "probe", "value": 1.0, "step": ok,
                                               "timestamp": int(time.time() * 1000)}]}
        try:
            ok = ok + 1 if http.post("/api/2.0/mlflow/runs/log-batch", json=body,
                                     timeout=30).status_code == 200 else 0
        except Exception:
            ok = 0
            time.sleep(1)


def _wait_http(url: str, proc: subprocess.Popen[bytes], timeout: float, log: Path) -> None:
    import httpx

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited ({proc.returncode}) before answering {url}:\n"
                               f"{log.read_text(errors='replace')[-3000:]}")
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            time.sleep(0.5)
    raise RuntimeError(f"no answer from {url} after {timeout} s; its log ends with:\n"
                       f"{log.read_text(errors='replace')[-3000:]}")


# ---------------------------------------------------------------------------------------------
def table(rows: list[dict[str, Any]]) -> str:
    header = (f"{'target':<46} {'reports/s':>9} {'p50 ms':>7} {'p99 ms':>7} {'errors':>6} "
              f"{'server CPU':>11} {'stored':>8}")
    units = f"{'':<46} {'':>9} {'':>7} {'':>7} {'':>6} {'ms/report':>11} {'(all)':>8}"
    lines = [header, units, "-" * 100]
    for r in rows:
        lines.append(f"{r['target']:<46} {r['rate']:>9.0f} {r['p50_ms']:>7.1f} "
                     f"{r['p99_ms']:>7.1f} {r['errors']:>6} {r['server_cpu_ms']:>11.2f} "
                     f"{r['stored']:>8}")
    return "\n".join(lines)


def ratios(rows: list[dict[str, Any]]) -> str:
    """Each gridml run's rate (and server CPU per report) against each MLflow backend's; the
    like-for-like pairs first: SQLite WAL vs SQLite WAL, PostgreSQL vs PostgreSQL."""
    peers = [r for r in rows if r["target"].startswith("MLflow")]
    ours = [r for r in rows if not r["target"].startswith("MLflow")]
    if not peers or not ours:
        return ""
    lines = ["\nrate ratio gridml / MLflow (server CPU per report: MLflow / gridml):"]
    for r in ours:
        db = "PostgreSQL" if "PostgreSQL" in r["target"] else "SQLite, WAL"
        cells = []
        for p in sorted(peers, key=lambda p: db not in p["target"]):
            mark = "*" if db in p["target"] else ""
            rate = f"{r['rate'] / p['rate']:.1f}x" if p["rate"] else "- (no MLflow report timed)"
            cpu = (f" (CPU {p['server_cpu_ms'] / r['server_cpu_ms']:.0f}x)"
                   if p["rate"] and r["server_cpu_ms"] else "")
            cells.append(f"{mark}{p['target'].removeprefix('MLflow server ')} {rate}{cpu}")
        lines.append(f"  {r['target']}: " + "; ".join(cells))
    lines.append("  (* the same database and journal mode on both sides)")
    return "\n".join(lines)


def big_table(rows: list[dict[str, Any]]) -> str:
    """Each big-store run against its empty-store run, and the dashboard's load time."""
    lines = []
    for empty, big in zip(rows, rows[1:]):
        if "dashboard" not in big or "dashboard" in empty:
            continue
        d = big["dashboard"]
        browser = "-" if big.get("browser_s") is None else f"{big['browser_s']:.2f} s"
        lines += [f"\n{big['target']} vs empty: rate {big['rate'] / empty['rate']:.0%}, "
                  f"p99 {big['p99_ms'] / empty['p99_ms']:.0%} of the empty store's "
                  "(goal: within 20 %)",
                  f"  dashboard study page: API calls {d['total']:.0f} ms (studies "
                  f"{d['studies']:.0f}, summary {d['summary']:.0f} || trials {d['trials']:.0f}, "
                  f"epochs {d['epochs']:.0f} ms for {d['epochs_mb']:.1f} MB; page+js+css "
                  f"{d['page + js + css']:.0f} ms); headless Chromium {browser} (goal: < 2 s)"]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--trials", type=int, default=64)
    parser.add_argument("--workers", type=int, default=2, help="gridml serve workers")
    parser.add_argument("--skip", nargs="*", default=[],
                        choices=["sqlite", "postgresql", "mlflow", *MLFLOW_TARGETS],
                        help="targets left out (mlflow: all three MLflow backends)")
    parser.add_argument("--big-trials", type=int, default=10_000,
                        help="trials of the big study of the second run (0: no second run)")
    parser.add_argument("--big-epochs", type=int, default=20)
    parser.add_argument("--no-browser", dest="browser", action="store_false",
                        help="leave out the dashboard's timing in headless Chromium")
    parser.add_argument("--generate", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.generate:
        generate_main(args.generate)
        return 0
    from tests import pg as testing

    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="gridml-bench-") as tmp:
        workdir = Path(tmp)
        os.environ["GRIDML_HOME"] = str(workdir / "home")
        try:  # one throwaway PostgreSQL server for gridml's and MLflow's rows alike
            if "sqlite" not in args.skip:
                rows += bench_gridml(f"gridml serve, SQLite ({args.workers} workers)",
                                     f"sqlite:///{workdir / 'bench.db'}", args, workdir)
            if "postgresql" not in args.skip:
                rows += bench_gridml(f"gridml serve, PostgreSQL ({args.workers} workers)",
                                     postgres_db(workdir), args, workdir)
            for target in MLFLOW_TARGETS:
                if "mlflow" not in args.skip and target not in args.skip:
                    rows.append(bench_mlflow(target, args, workdir))
                    print(f"{rows[-1]['target']}: {rows[-1]['rate']:.0f} reports/s, p99 "
                          f"{rows[-1]['p99_ms']:.0f} ms", flush=True)
        finally:
            testing.stop_started_postgres()
    print(f"\n{args.trials} concurrent simulated trials, {args.seconds:.0f} s each after "
          f"{WARMUP:.0f} s warm-up; load generator in its own process; "
          f"{os.cpu_count()} cores; stored: acknowledged reports found stored once each\n")
    print(table(rows))
    print(ratios(rows))
    print(big_table(rows))
    print(f"\nload average during the run (1/5/15 min): {os.getloadavg()}; the load "
          f"generator used {rows[0]['gen_cpu_ms']:.2f} ms CPU per report" if rows else "")
    return 0


if __name__ == "__main__":
    sys.exit(main())
