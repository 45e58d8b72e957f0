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
    """GRIDML_HOME after `gridml submit` of 3 trials x 2 epochs (1 rank each, 2 at once)."""
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
          parallel: 2
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
        _updates_live(browser, server.url, url)
        severe = [e for e in browser.get_log("browser") if e.get("level") == "SEVERE"]
        assert severe == []


def _sorts_by_objective(browser) -> None:
    from selenium.webdriver.common.by import By

    header = browser.find_element(By.CSS_SELECTOR, "#trials th[data-key='objective']")
    header.click()
    values = [float(r.find_elements(By.TAG_NAME, "td")[2].text)
              for r in browser.find_elements(By.CSS_SELECTOR, "#trials tbody tr")]
    assert values == sorted(values)
    browser.find_element(By.CSS_SELECTOR, "#trials th[data-key='objective']").click()
    values = [float(r.find_elements(By.TAG_NAME, "td")[2].text)
              for r in browser.find_elements(By.CSS_SELECTOR, "#trials tbody tr")]
    assert values == sorted(values, reverse=True)


def _click_shows_curves(browser) -> None:
    from selenium.webdriver.common.by import By

    assert not browser.find_elements(By.CSS_SELECTOR, "#curves polyline.curve")
    browser.find_element(By.CSS_SELECTOR, "#trials tbody tr").click()
    curves = _wait(browser, lambda b: b.find_elements(By.CSS_SELECTOR, "#curves polyline.curve"))
    metrics = {c.get_attribute("data-metric") for c in curves}
    assert {"loss", "val_loss"} <= metrics
    points = curves[0].get_attribute("points").split()
    assert len(points) == 2  # two epochs
    assert len(browser.find_elements(By.CSS_SELECTOR, "#timing rect.epoch-time")) == 2
    assert browser.find_elements(By.CSS_SELECTOR, "#timing polyline[data-series='input-wait']")
    assert "selected" in browser.find_element(By.CSS_SELECTOR, "#trials tr.selected") \
        .get_attribute("class")


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

