"""The big-store half of ``metrics_api.py``: a store that already holds a 10,000-trial study
(20 epochs each), filled fast with bulk SQL, and the load time of the dashboard's study page.

    fill_big_study(db_url, trials=10_000, epochs=20)   # bulk INSERTs (Core executemany),
                                                      # then every one of them counted
    dashboard_api_times(server_url, "big")            # the API calls the page makes, timed
    dashboard_browser_time(server_url, "big")         # headless Chromium, navigation -> table
"""

from __future__ import annotations

import shutil
import time
from datetime import UTC, datetime
from typing import Any

BIG = "big"
PAGE = 1000  # the dashboard's page of trials


def fill_big_study(db_url: str, trials: int, epochs: int) -> float:
    """A completed study of ``trials`` x ``epochs`` reports; returns the seconds it took."""
    from sqlalchemy import distinct, func, select

    from gridml.store import EpochReport, open_store
    from gridml.store.sql import convert
    from gridml.store.sql.models import EpochRow, TrialRow

    start = time.perf_counter()
    store = open_store(db_url)
    spec = {"search": {"objective": "val_loss", "direction": "minimize", "max_trials": trials,
                       "space": {"lr": {"type": "real", "low": 1e-4, "high": 0.1},
                                 "units": {"type": "int", "low": 8, "high": 128}}},
            "output": {"dataset": "user.bench:big.out"}}
    study = store.create_study(BIG, spec, "big")
    now = datetime.now(UTC)
    rows = [{"study_id": study.id, "number": n, "state": "completed", "epochs_done": epochs,
             "hparams": {"lr": 1e-4 + (n % 9990) * 1e-5, "units": 8 + n % 120},  # in the space
             "objective": 0.2 + (n * 7919 % 1000) / 2000, "source": "searcher", "attempts": 1,
             "created": now, "started": now, "finished": now} for n in range(trials)]
    with store.engine.begin() as conn:
        conn.execute(TrialRow.__table__.insert(), rows)
        ids = dict(conn.execute(TrialRow.__table__.select().with_only_columns(
            TrialRow.number, TrialRow.id).where(TrialRow.study_id == study.id)).all())
    batch: list[dict[str, Any]] = []
    for n in range(trials):
        for e in range(1, epochs + 1):
            body = convert.canonical_epoch(EpochReport(
                e, {"loss": 1.0 / e, "val_loss": 1.1 / e + n * 1e-6, "accuracy": 1 - 0.5 / e,
                    "val_accuracy": 1 - 0.6 / e}, 2.5, samples_per_s=8000.0,
                input_wait_frac=0.03, peak_rss_mb=900.0, threads=12))
            batch.append({"trial_id": ids[n], "epoch": e, "created": now,
                          "body": convert.encode_body(body), "body_hash": convert.body_hash(body)})
        if len(batch) >= 20_000 or n == trials - 1:
            with store.engine.begin() as conn:
                conn.execute(EpochRow.__table__.insert(), batch)
            batch = []
    with store.engine.connect() as conn:  # the big study is whole, or the run says so
        stored = conn.execute(select(func.count(), func.count(distinct(
            EpochRow.trial_id * (epochs + 1) + EpochRow.epoch))).select_from(EpochRow).join(
            TrialRow, TrialRow.id == EpochRow.trial_id).where(
            TrialRow.study_id == study.id)).one()
    store.close()
    if tuple(stored) != (trials * epochs, trials * epochs):
        raise RuntimeError(f"big study: {trials * epochs} reports inserted, (rows, distinct) "
                           f"stored: {tuple(stored)}")
    return time.perf_counter() - start


def dashboard_api_times(url: str, study: str = BIG, repeat: int = 3) -> dict[str, float]:
    """The study page's requests in the page's order (studies; summary + trials at once; the
    epochs of the trials shown), timed end to end; the best of ``repeat`` loads, in ms."""
    import concurrent.futures

    import httpx

    def get(client: httpx.Client, path: str) -> tuple[float, int]:
        t0 = time.perf_counter()
        reply = client.get(path)
        reply.raise_for_status()
        return 1000 * (time.perf_counter() - t0), len(reply.content)

    best: dict[str, float] = {}
    with httpx.Client(base_url=url, timeout=120) as client, \
            concurrent.futures.ThreadPoolExecutor(2) as pool:
        for _ in range(repeat):
            t0 = time.perf_counter()
            times = {"page + js + css": sum(get(client, p)[0] for p in
                                            ("/", "/static/dashboard.js", "/static/dashboard.css"))}
            times["studies"] = get(client, "/api/v1/studies")[0]
            summary = pool.submit(get, client, f"/api/v1/studies/{study}")
            trials = pool.submit(get, client, f"/api/v1/studies/{study}/trials?limit={PAGE}")
            times["summary"], times["trials"] = summary.result()[0], trials.result()[0]
            times["epochs"], size = get(client, f"/api/v1/studies/{study}/epochs?limit={PAGE}")
            times["total"] = 1000 * (time.perf_counter() - t0)
            times["epochs_mb"] = size / 1e6
            if not best or times["total"] < best["total"]:
                best = times
    return best


def dashboard_browser_time(url: str, study: str = BIG, rows: int = PAGE) -> float | None:
    """Seconds from navigating to the study page to its trials table filled, in headless
    Chromium (None where Debian's chromium / chromedriver or selenium are missing)."""
    binary, driver = shutil.which("chromium"), shutil.which("chromedriver")
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
        from selenium.webdriver.common.by import By
        from selenium.webdriver.support.ui import WebDriverWait
    except ImportError:
        return None
    if not binary or not driver:
        return None
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run",
                 "--disable-dev-shm-usage", "--window-size=1400,1600"):
        options.add_argument(flag)
    chrome = webdriver.Chrome(service=Service(driver), options=options)
    try:
        best = None
        for _ in range(2):  # the first load also warms the browser's own caches
            chrome.get("about:blank")
            start = time.perf_counter()
            chrome.get(f"{url}/#study={study}")
            WebDriverWait(chrome, 120, poll_frequency=0.02).until(
                lambda b: len(b.find_elements(By.CSS_SELECTOR, "#trials tbody tr")) >= rows
                and b.find_elements(By.CSS_SELECTOR, "#objective circle, #objective polyline"))
            took = time.perf_counter() - start
            best = took if best is None else min(best, took)
        return best
    finally:
        chrome.quit()
