"""One rule for the API URL a remote trial gets (gridml/executors/reach.py): never one a worker
node cannot reach; the PanDA trial document and the Slurm trial file follow it."""

from __future__ import annotations

import pytest

from gridml.executors.panda.request import grid_trial_document
from gridml.executors.reach import reachable_api_url, unreachable_host


@pytest.mark.parametrize("url", [
    "http://127.0.0.1:8765", "http://127.3.4.5:80/", "http://localhost:9000", "http://LOCALHOST",
    "http://[::1]:8000", "http://0.0.0.0:8000", "http://[::]:1", "http://169.254.1.2:80",
    "http://[fe80::1]:80", "http://api.localhost:80", "http:///nohost"])
def test_unreachable_urls_are_dropped_for_remote_trials(url: str) -> None:
    assert unreachable_host(url)
    assert reachable_api_url(url, remote=True) is None
    assert reachable_api_url(url, remote=False) == url  # a local trial keeps it


@pytest.mark.parametrize("url", ["https://gridml.example.org:8443", "http://10.1.2.3:8000",
                                 "http://[2001:db8::5]:80", "http://login01:8000"])
def test_reachable_urls_are_kept(url: str) -> None:
    assert unreachable_host(url) is None
    assert reachable_api_url(url, remote=True) == url


def test_none_stays_none() -> None:
    assert reachable_api_url(None, remote=True) is None


def _doc(url: str | None) -> dict[str, object]:
    return {"data": {"train": ["/staged/a.h5"], "validation": ["/staged/b.h5"]},
            "api": None if url is None else {"url": url, "token": "t0k"}}


def test_the_grid_trial_document_carries_no_loopback_api() -> None:
    doc = grid_trial_document(_doc("http://127.0.0.1:41234"))
    assert doc["api"] is None
    assert doc["data"] == {"train": ["a.h5"], "validation": ["b.h5"]}


def test_the_grid_trial_document_keeps_a_served_api() -> None:
    doc = grid_trial_document(_doc("https://gridml.example.org:8443"))
    assert doc["api"] == {"url": "https://gridml.example.org:8443", "token": "t0k"}
    assert grid_trial_document(_doc(None))["api"] is None
