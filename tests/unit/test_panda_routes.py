"""The double serves exactly the routes and methods the installed panda-client calls.

Read from panda-client itself (its ``http_request_decorator`` closures and ``hello``), so a new
panda-client that moves an endpoint fails here, not in a confusing wire test."""

from __future__ import annotations

import inspect

import pytest

from gridml.executors.panda.executor import client as panda_client
from tests.panda_double.server import ROUTES

CALLED = {  # the panda-client functions gridml calls (directly or through their *_internal)
    "insertTaskParams_internal": ("POST", "task/submit"),
    "getTaskStatus": ("GET", "task/get_status"),
    "getJediTaskDetails_internal": ("GET", "task/get_details"),
    "killTask": ("POST", "task/kill"),
    "retryTask_internal": ("POST", "task/retry"),
    "getTaskParamsMap": ("GET", "task/get_task_parameters"),
}


@pytest.fixture
def client(monkeypatch: pytest.MonkeyPatch) -> object:
    monkeypatch.setenv("PANDA_BEHIND_REAL_LB", "1")  # no DNS lookup at import
    return panda_client.client()


@pytest.mark.parametrize("function", sorted(CALLED))
def test_each_call_goes_where_the_double_answers(client: object, function: str) -> None:
    found = inspect.getclosurevars(getattr(client, function)).nonlocals
    route = (str(found["method"]).upper(), str(found["endpoint"]))
    assert route == CALLED[function]
    assert route in ROUTES


def test_the_health_check_too(client: object) -> None:
    assert '"/system/is_alive"' in inspect.getsource(client.hello)  # type: ignore[attr-defined]
    assert "client.get(url" in inspect.getsource(client.hello)  # type: ignore[attr-defined]
    assert ("GET", "system/is_alive") in ROUTES
    assert len(ROUTES) == len(CALLED) + 1 + len(SANDBOX)  # nothing served that gridml does not use


SANDBOX = {  # Client.putFile: the sandbox upload (reuse check first)
    ("POST", "file_server/validate_cache_file"): 'endpoint = "file_server/validate_cache_file"',
    ("POST", "file_server/upload_cache_file"): "/file_server/upload_cache_file",
}


@pytest.mark.parametrize("route", sorted(SANDBOX))
def test_the_sandbox_upload_goes_where_the_double_answers(client: object, route: tuple) -> None:
    source = inspect.getsource(client.putFile)  # type: ignore[attr-defined]
    assert SANDBOX[route] in source
    assert route in ROUTES
