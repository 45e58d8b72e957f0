"""Metrics API throughput: sustained epoch reports/s and latency, gridml vs MLflow, in one run.

    .venv/bin/python benchmarks/metrics_api.py [--seconds 20] [--trials 64] [--workers 2]

64 simulated trials (one keep-alive connection each) post epoch reports back to back for
``--seconds`` (after a 2 s warm-up), against, in turn:
  1. `gridml serve` on SQLite            (WAL, one file)
  2. `gridml serve` on PostgreSQL        (throwaway server from scripts/postgres.sh)
  3. an MLflow tracking server           (`mlflow server`, SQLite backend, its defaults), the peer:
     one report = one log-batch call with the same four metrics.
The load generator runs in its own process (asyncio, raw HTTP/1.1, so that it costs the server
as little CPU as possible on this 2-core machine). MLflow is installed by this script into its
own venv under ~/.cache/gridml/bench-mlflow (first run: a few minutes).
Goal (issue 4): >= 2,000 reports/s with p99 < 50 ms, and ahead of the peer.

Each gridml target runs twice: on an empty store, then on the same store after a study of
``--big-trials`` (10,000) x ``--big-epochs`` (20) reports was bulk-inserted beside it
(``metrics_api_big.py``): the rate and p99 must stay within 20 % of the empty-store run. On the
big store the dashboard's study page for that study is then timed: the API calls it makes, and
in headless Chromium (Debian's chromium + chromedriver) from navigation to its table filled
(goal: < 2 s). ``--big-trials 0`` skips that half.
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
    while time.perf_counter() < stop_at:
        epoch += 1
        start = time.perf_counter()
        writer.write(_request(plan, trial, epoch))
        try:
            status = await _read_reply(reader)
        except (asyncio.IncompleteReadError, ConnectionError):
            out["errors"] += 1
            writer.close()
            reader, writer = await asyncio.open_connection(host, int(port))
            continue
        end = time.perf_counter()
        if start >= measure_from:
            out["lat"].append(end - start)
            if status >= 300:
                out["errors"] += 1
    writer.close()


async def _generate(plan: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"lat": [], "errors": 0}
    now = time.perf_counter()
    measure_from, stop_at = now + WARMUP, now + WARMUP + plan["seconds"]
    await asyncio.gather(*(_one_trial(plan, t, stop_at, measure_from, out)
                           for t in plan["trials"]))
    lat = sorted(out["lat"])

    def pct(q: float) -> float:
        return 1000 * lat[min(len(lat) - 1, int(q * len(lat)))] if lat else float("nan")

    return {"reports": len(lat), "seconds": plan["seconds"], "rate": len(lat) / plan["seconds"],
            "p50_ms": pct(0.50), "p99_ms": pct(0.99), "errors": out["errors"],
            "gen_cpu_s": time.process_time()}


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
        trials.append({"id": trial.id, "token": trial.token})
    store.close()
    return trials


def bench_gridml(label: str, db_url: str, args: argparse.Namespace,
                 workdir: Path) -> list[dict[str, Any]]:
    """The load on an empty store, then (``--big-trials``) on the same store holding a big
    study too, with the dashboard timed on that study; one row per run."""
    from gridml.server.process import ServerProcess
    from metrics_api_big import dashboard_api_times, dashboard_browser_time, fill_big_study

    rows = []
    for big in ([False, True] if args.big_trials else [False]):
        if big:
            fill_s = fill_big_study(db_url, args.big_trials, args.big_epochs)
            print(f"{label}: {args.big_trials} x {args.big_epochs} reports inserted in "
                  f"{fill_s:.1f} s", flush=True)
        trials = _fill_gridml(db_url, args.trials, name="bench-big" if big else "bench")
        with ServerProcess(db_url, workers=args.workers, log=workdir / f"{label}.log") as server:
            plan = {"kind": "gridml", "host": server.url.removeprefix("http://"),
                    "seconds": args.seconds, "trials": trials}
            result = run_load(plan, workdir, server.proc.pid)
            _check_stored(db_url, trials, result)
            if big:
                result["dashboard"] = dashboard_api_times(server.url)
                result["browser_s"] = dashboard_browser_time(server.url)
        store = f"+ {args.big_trials // 1000}k x {args.big_epochs} study" if big else "empty"
        rows.append({"target": f"{label}, {store}", **result})
    return rows


def _check_stored(db_url: str, trials: list[dict[str, Any]], result: dict[str, Any]) -> None:
    """Every acknowledged report is in the database (the warm-up ones too)."""
    from sqlalchemy import text

    from gridml.store import open_store

    store = open_store(db_url)
    with store.engine.connect() as conn:
        stored = conn.execute(text("SELECT count(*) FROM epochs")).scalar()
    store.close()
    result["stored"] = stored
    assert stored >= result["reports"], (stored, result)  # (the big study's rows count too)


def postgres_db(workdir: Path) -> str:
    from tests import pg as testing

    base = testing.postgres_url()
    if base is None:
        raise RuntimeError("no PostgreSQL: scripts/postgres.sh could not start one")
    return testing.create_database(base)


def ensure_mlflow() -> Path:
    """MLflow in its own venv (it pins packages gridml's environment must not get)."""
    python = MLFLOW_ENV / "bin" / "python"
    marker = MLFLOW_ENV / ".installed"
    if not marker.exists():
        print(f"installing mlflow into {MLFLOW_ENV} (first run only) ...", flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(MLFLOW_ENV)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", "mlflow"], check=True)
        marker.touch()
    return MLFLOW_ENV / "bin" / "mlflow"


def bench_mlflow(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    import httpx

    from gridml.server.process import free_port

    mlflow = ensure_mlflow()
    port = free_port()
    with open(workdir / "mlflow.log", "wb") as log:  # the server keeps its own copy
        proc = subprocess.Popen([str(mlflow), "server", "--backend-store-uri",
                                 f"sqlite:///{workdir / 'mlflow.db'}", "--default-artifact-root",
                                 str(workdir / "mlruns"), "--host", "127.0.0.1", "--port",
                                 str(port)], stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_http(f"{url}/health", proc, 300, workdir / "mlflow.log")
        with httpx.Client(base_url=url, timeout=60) as http:
            exp = http.post("/api/2.0/mlflow/experiments/create", json={"name": "bench"}).json()
            runs = [http.post("/api/2.0/mlflow/runs/create", json={
                "experiment_id": exp["experiment_id"], "run_name": f"trial-{i}",
                "start_time": int(time.time() * 1000)}).json()["run"]["info"]["run_id"]
                for i in range(args.trials)]
            _settle(http, runs[0])
        plan = {"kind": "mlflow", "host": f"127.0.0.1:{port}", "seconds": args.seconds,
                "trials": [{"run_id": r} for r in runs]}
        return {"target": "MLflow server (SQLite, defaults)", **run_load(plan, workdir, proc.pid)}
    finally:
        _stop_group(proc)


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
def table(rows: list[dict[str, Any]], peer: float | None) -> str:
    header = (f"{'target':<38} {'reports/s':>9} {'p50 ms':>7} {'p99 ms':>7} {'errors':>6} "
              f"{'server CPU':>11} {'vs MLflow':>9}")
    units = f"{'':<38} {'':>9} {'':>7} {'':>7} {'':>6} {'ms/report':>11} {'(rate)':>9}"
    lines = [header, units, "-" * 94]
    for r in rows:
        ratio = f"{r['rate'] / peer:.1f}x" if peer else "-"
        lines.append(f"{r['target']:<38} {r['rate']:>9.0f} {r['p50_ms']:>7.1f} "
                     f"{r['p99_ms']:>7.1f} {r['errors']:>6} {r['server_cpu_ms']:>11.2f} "
                     f"{ratio:>9}")
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
    parser.add_argument("--skip", nargs="*", default=[], choices=["sqlite", "postgresql",
                                                                  "mlflow"])
    parser.add_argument("--big-trials", type=int, default=10_000,
                        help="trials of the big study of the second run (0: no second run)")
    parser.add_argument("--big-epochs", type=int, default=20)
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
        if "sqlite" not in args.skip:
            rows += bench_gridml(f"gridml serve, SQLite ({args.workers} workers)",
                                 f"sqlite:///{workdir / 'bench.db'}", args, workdir)
        if "postgresql" not in args.skip:
            try:
                rows += bench_gridml(f"gridml serve, PostgreSQL ({args.workers} workers)",
                                     postgres_db(workdir), args, workdir)
            finally:
                testing.stop_started_postgres()
        peer = None
        if "mlflow" not in args.skip:
            rows.append(bench_mlflow(args, workdir))
            peer = rows[-1]["rate"]
    print(f"\n{args.trials} concurrent simulated trials, {args.seconds:.0f} s each after "
          f"{WARMUP:.0f} s warm-up; load generator in its own process; "
          f"{os.cpu_count()} cores\n")
    print(table(rows, peer))
    print(big_table(rows))
    print(f"\nload average during the run (1/5/15 min): {os.getloadavg()}; the load "
          f"generator used {rows[0]['gen_cpu_ms']:.2f} ms CPU per report" if rows else "")
    return 0


if __name__ == "__main__":
    sys.exit(main())
