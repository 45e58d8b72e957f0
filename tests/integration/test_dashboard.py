"""The dashboard in a real headless Chromium (Debian's chromium + chromedriver, via Selenium),
on a `gridml serve` whose database a real small campaign filled (TF + Horovod payloads)."""

from __future__ import annotations

import os
import shutil
import textwrap

import pytest

from gridml.client import ApiClient
from gridml.server.process import ServerProcess
from gridml.store import EpochReport

pytestmark = [pytest.mark.service, pytest.mark.slow, pytest.mark.e2e]

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run",
         "--disable-dev-shm-usage", "--window-size=1400,1600"]


@pytest.fixture(scope="module")
def campaign_home(tmp_path_factory):
    """GRIDML_HOME after `gridml submit` of 3 trials x 2 epochs (1 rank each, all 3 at once:
    one wave of trials). The Keras payload: the ROC overlay's curves are its probabilities."""
    from tests.helpers import gridml, make_registered_sample_data, write_spec

    tmp = tmp_path_factory.mktemp("dash")
    mp = pytest.MonkeyPatch()
    mp.setenv("GRIDML_HOME", str(tmp / "home"))
    train, val = make_registered_sample_data(tmp, n_train=2000, n_val=500)
    training = "training: {epochs: 2, batch_size: 128, metrics: [accuracy], workers: 1}\n"
    search = textwrap.dedent("""\
        search:
          algorithm: random
          objective: val_loss
          max_trials: 3
          parallel: 3
          seed: 5
          space:
            learning_rate: {type: real, low: 1.0e-3, high: 3.0e-2, log: true}
            units: {type: int, low: 8, high: 32}
            activation: {type: categorical, choices: [relu, tanh]}
        """)
    spec = write_spec(tmp / "spec.yaml", "dash", train, val, training=training, search=search,
                      resources="resources: {cores: 1, gpus: 0, memory_gb: 2, walltime: 20m}\n")
    gridml("submit", str(spec), "--quiet", timeout=900)
    yield tmp / "home"
    mp.undo()


@pytest.fixture(scope="module")
def browser():
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    os.environ["SE_AVOID_STATS"] = "true"  # Selenium Manager: no network calls (none is used)
    binary, driver = shutil.which("chromium"), shutil.which("chromedriver")
    if not binary or not driver:
        pytest.fail("needs Debian's chromium and chromium-driver: "
                    "apt-get install -y chromium chromium-driver")
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for flag in FLAGS:
        options.add_argument(flag)
    chrome = webdriver.Chrome(service=Service(driver), options=options)
    yield chrome
    chrome.quit()


def _wait(browser, condition, timeout: float = 15):
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(browser, timeout).until(condition)


def _read(browser, read, timeout: float = 15):
    """``read(browser)``, read again where the page redrew meanwhile: the dashboard re-renders
    its panels on its polls, so an element found a moment ago may be stale when read."""
    from selenium.common.exceptions import StaleElementReferenceException

    def attempt(b):
        try:
            return (read(b),)
        except StaleElementReferenceException:
            return None

    return _wait(browser, attempt, timeout)[0]


def test_dashboard_renders_campaign_and_shows_curves(campaign_home, browser, tmp_path):
    from selenium.webdriver.common.by import By

    url = f"sqlite:///{campaign_home / 'gridml.db'}"
    with ServerProcess(url, log=tmp_path / "serve.log") as server:
        browser.get(f"{server.url}/#study=dash")
        rows = _wait(browser, lambda b: b.find_elements(By.CSS_SELECTOR, "#trials tbody tr")
                     if len(b.find_elements(By.CSS_SELECTOR, "#trials tbody tr")) == 3 else None)
        states = [r.find_elements(By.TAG_NAME, "td")[1].text for r in rows]
        assert states == ["completed"] * 3
        assert len(browser.find_elements(By.CSS_SELECTOR, "#objective circle.trial-point")) == 3
        assert browser.find_elements(By.CSS_SELECTOR, "#objective polyline.best")
        assert len(browser.find_elements(By.CSS_SELECTOR, "#parallel polyline.pc-line")) == 3
        _sorts_by_objective(browser)
        _click_shows_curves(browser)
        _overlays_roc_curves(browser, server.url)
        _updates_live(browser, server.url, url)
        severe = [e for e in browser.get_log("browser") if e.get("level") == "SEVERE"]
        assert severe == []


def _sorts_by_objective(browser) -> None:
    from selenium.webdriver.common.by import By

    def objectives(b):
        return [float(r.find_elements(By.TAG_NAME, "td")[2].text)
                for r in b.find_elements(By.CSS_SELECTOR, "#trials tbody tr")]

    header = browser.find_element(By.CSS_SELECTOR, "#trials th[data-key='objective']")
    header.click()
    values = _read(browser, objectives)
    assert values == sorted(values)
    browser.find_element(By.CSS_SELECTOR, "#trials th[data-key='objective']").click()
    values = _read(browser, objectives)
    assert values == sorted(values, reverse=True)


def _click_shows_curves(browser) -> None:
    from selenium.webdriver.common.by import By

    assert not browser.find_elements(By.CSS_SELECTOR, "#curves polyline.curve")
    browser.find_element(By.CSS_SELECTOR, "#trials tbody tr").click()
    _wait(browser, lambda b: b.find_elements(By.CSS_SELECTOR, "#curves polyline.curve"))
    metrics, points = _read(browser, lambda b: (
        {c.get_attribute("data-metric") for c in b.find_elements(By.CSS_SELECTOR, "#curves polyline.curve")},
        b.find_element(By.CSS_SELECTOR, "#curves polyline.curve").get_attribute("points").split()))
    assert {"loss", "val_loss"} <= metrics
    assert len(points) == 2  # two epochs
    assert len(browser.find_elements(By.CSS_SELECTOR, "#timing rect.epoch-time")) == 2
    assert browser.find_elements(By.CSS_SELECTOR, "#timing polyline[data-series='input-wait']")
    assert "selected" in browser.find_element(By.CSS_SELECTOR, "#trials tr.selected") \
        .get_attribute("class")


def _overlays_roc_curves(browser, url: str) -> None:
    """The best trials' stored roc.json curves, overlaid best first (val_loss: lowest first),
    rejection on a log axis; the API gives the same curves the page draws."""
    import json
    import urllib.request

    from selenium.webdriver.common.by import By

    with urllib.request.urlopen(f"{url}/api/v1/studies/dash/roc?n=5", timeout=30) as reply:
        doc = json.loads(reply.read())
    assert doc["missing"] == [] and len(doc["trials"]) == 3
    objectives = [t["objective"] for t in doc["trials"]]
    assert objectives == sorted(objectives)
    for t in doc["trials"]:
        assert t["output"] == "probability" and 0.5 < t["auc"] <= 1
        eff_s, eff_b = t["signal_efficiency"], t["background_efficiency"]
        assert len(eff_s) == len(eff_b) > 10 and eff_s == sorted(eff_s)
        assert abs(eff_s[-1] - 1) < 1e-9 and eff_s[0] == 0
    _wait(browser, lambda b: len(b.find_elements(By.CSS_SELECTOR, "#roc polyline.roc-curve")) == 3)

    def roc_panel(b):  # read at once: the panel is redrawn on the page's polls
        lines = b.find_elements(By.CSS_SELECTOR, "#roc polyline.roc-curve")
        return ([int(x.get_attribute("data-trial")) for x in lines],
                lines[0].get_attribute("points").split(),
                [lb.text.split()[0] for lb in b.find_elements(By.CSS_SELECTOR, "#roc text.roc-label")])

    trials, points, labels = _read(browser, roc_panel)
    assert trials == [t["number"] for t in doc["trials"]]
    # log y: rejection 1/eps_b falls with the signal efficiency; its highest point is on top
    ys = [float(p.split(",")[1]) for p in points]
    assert ys == sorted(ys) and ys[0] < ys[-1]
    assert labels == [f"#{t['number']}" for t in doc["trials"]]


def _updates_live(browser, url: str, db_url: str) -> None:
    """A trial enqueued by an external optimizer appears without a reload."""
    from selenium.webdriver.common.by import By

    from gridml.store import open_store

    store = open_store(db_url)
    study = store.get_study("dash")
    trial = store.create_trial(study.id, {"learning_rate": 0.01, "units": 9,
                                          "activation": "relu"}, source="external")
    store.close()
    ApiClient(url, token=trial.token).post_epoch(trial.id, EpochReport(1, {"loss": 0.7}, 1.0))
    _wait(browser, lambda b: len(b.find_elements(By.CSS_SELECTOR, "#trials tbody tr")) == 4)



# ---- several objectives (issue 14): a real campaign's Pareto front in the CLI and the dashboard --
@pytest.fixture(scope="module")
def pareto_home(tmp_path_factory):
    """GRIDML_HOME after a 5-trial, 1-epoch campaign with two objectives (val_loss and the
    payload's inference_ms) and a constraint on n_params. The torch example model (its payload
    measures the same cost metrics; a trial starts at half TensorFlow's cost), 3 at a time."""
    pytest.importorskip("torch")
    from tests.helpers import TORCH_PAYLOAD, gridml, make_registered_sample_data, write_spec

    tmp = tmp_path_factory.mktemp("pareto")
    mp = pytest.MonkeyPatch()
    mp.setenv("GRIDML_HOME", str(tmp / "home"))
    train, val = make_registered_sample_data(tmp, n_train=1500, n_val=400)
    training = "training: {epochs: 1, batch_size: 128, metrics: [accuracy], workers: 1}\n"
    search = textwrap.dedent("""\
        search:
          algorithm: random
          objectives: [{metric: val_loss, direction: minimize},
                       {metric: inference_ms, direction: minimize}]
          constraints: ["n_params >= 1"]
          max_trials: 5
          parallel: 3
          seed: 7
          space:
            learning_rate: {type: real, low: 1.0e-3, high: 3.0e-2, log: true}
            units: {type: int, low: 4, high: 64}
        """)
    spec = write_spec(tmp / "spec.yaml", "pareto", train, val, training=training, search=search,
                      payload=TORCH_PAYLOAD,
                      resources="resources: {cores: 1, gpus: 0, memory_gb: 2, walltime: 20m}\n")
    proc = gridml("submit", str(spec), "--quiet", timeout=900)
    assert "Pareto front: trials" in proc.stdout
    yield tmp
    mp.undo()


def test_pareto_front_in_cli_and_dashboard(pareto_home, browser, tmp_path):
    from selenium.webdriver.common.by import By

    from tests.helpers import gridml, gridml_json

    doc = gridml_json("status", "pareto")
    trials = doc["trials"]
    assert [t["state"] for t in trials] == ["completed"] * 5
    for t in trials:  # the payload's cost metrics, in every epoch
        metrics = gridml_json("status", "pareto", "--trial", str(t["number"]))["epochs"][0]["metrics"]
        assert metrics["n_params"] >= 1 and metrics["model_mb"] > 0 and metrics["inference_ms"] > 0
        assert t["objectives"] == [metrics["val_loss"], metrics["inference_ms"]] and t["feasible"]
    front = doc["study"]["pareto"]
    numbers = [t["number"] for t in front]
    assert numbers and numbers == sorted(numbers)
    for t in front:  # nobody dominates a front trial; every other trial is dominated
        assert not any(o["objectives"][0] <= t["objectives"][0] and o["objectives"][1] <= t["objectives"][1]
                       and o["objectives"] != t["objectives"] for o in trials)
    for t in trials:
        if t["number"] not in numbers:
            assert any(f["objectives"][0] <= t["objectives"][0] and f["objectives"][1] <= t["objectives"][1]
                       for f in front)
    best = gridml_json("best", "pareto")
    assert [t["number"] for t in best["pareto"]] == numbers
    assert best["objective_names"] == [{"metric": "val_loss", "direction": "minimize"},
                                       {"metric": "inference_ms", "direction": "minimize"}]
    text = gridml("best", "pareto").stdout
    assert "Pareto front" in text and "learning_rate" in text
    dest = pareto_home / "front"
    gridml("fetch", "pareto", "--pareto", "-o", str(dest))
    names = {p.name for p in dest.iterdir()}
    assert all(any(n.startswith(f"pareto.trial-{k:04d}.") for n in names) for k in numbers), names

    url = f"sqlite:///{pareto_home / 'home' / 'gridml.db'}"
    with ServerProcess(url, log=tmp_path / "serve.log") as server:
        browser.get(f"{server.url}/#study=pareto")
        _wait(browser, lambda b: len(b.find_elements(By.CSS_SELECTOR, "#pareto circle")) == 5)

        def front(b):  # the points, their marks and titles, read from one rendering
            points = b.find_elements(By.CSS_SELECTOR, "#pareto circle")
            return (sorted(int(p.get_attribute("data-trial")) for p in points
                           if "pareto-point" in p.get_attribute("class")),
                    [p.find_element(By.TAG_NAME, "title").get_attribute("textContent")
                     for p in points])

        marked, titles = _read(browser, front)
        assert marked == numbers
        assert all(t.startswith("trial ") and "inference_ms = " in t for t in titles)
        labels = _read(browser, lambda b: sorted(
            lb.text for lb in b.find_elements(By.CSS_SELECTOR, "#pareto text.pareto-label")))
        assert labels == sorted(f"#{k}" for k in numbers)
        assert "Pareto front: trials" in browser.find_element(By.ID, "summary").text
        _wait(browser, lambda b: b.find_elements(By.CSS_SELECTOR, "#importance rect.importance-bar"))
        bars = _read(browser, lambda b: [
            (x.get_attribute("data-param"), float(x.get_attribute("data-share")))
            for x in b.find_elements(By.CSS_SELECTOR, "#importance rect.importance-bar")])
        assert {param for param, _ in bars} <= {"learning_rate", "units"}
        assert abs(sum(share for _, share in bars) - 1) < 1e-6
        # (the last test's page polled a server that is gone now: its errors are not this page's)
        severe = [e for e in browser.get_log("browser") if e.get("level") == "SEVERE"
                  and server.url in e.get("message", "")]
        assert severe == []


def test_a_study_with_a_trial_outside_its_space_shows_whole(browser, tmp_path):
    """A finished trial whose point lies outside the study's space (added before the space was
    what it is) is left out of the importance, and never blanks the page: before, the
    importance call failed (HTTP 409) and the dashboard drew no table, no plot, nothing."""
    from selenium.webdriver.common.by import By

    from gridml.store import open_store

    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    store = open_store(url)
    spec = {"search": {"objective": "val_loss", "direction": "minimize", "max_trials": 9,
                       "space": {"lr": {"type": "real", "low": 1e-4, "high": 0.1},
                                 "units": {"type": "int", "low": 8, "high": 128}}}}
    study = store.create_study("odd", spec, "odd")
    for n in range(9):
        hp = {"lr": 0.5 if n == 8 else 1e-4 + 0.01 * n, "units": 8 + 13 * n}  # trial 8: outside
        t = store.create_trial(study.id, hp, state="running")
        for epoch in (1, 2):
            store.record_epoch(t.id, EpochReport(epoch, {"val_loss": 0.2 + 0.03 * n + 0.1 / epoch},
                                                 epoch_time=1.0))
        store.update_trial(t.id, state="completed", objective=0.25 + 0.03 * n, epochs_done=2)
    with ServerProcess(url, log=tmp_path / "serve.log") as server:
        browser.get(f"{server.url}/#study=odd")
        _wait(browser, lambda b: len(b.find_elements(By.CSS_SELECTOR, "#trials tbody tr")) == 9)
        _wait(browser, lambda b: b.find_elements(By.CSS_SELECTOR, "#importance rect.importance-bar"))
        bars = _read(browser, lambda b: {x.get_attribute("data-param") for x in b.find_elements(
            By.CSS_SELECTOR, "#importance rect.importance-bar")})
        assert bars <= {"lr", "units"} and bars
        assert "not shown" not in browser.find_element(By.ID, "status").text
        assert browser.find_elements(By.CSS_SELECTOR, "#objective circle, #objective polyline")
