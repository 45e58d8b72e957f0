"""ApiClient's one request path: retries and error mapping (httpx's MockTransport as the wire)."""

from __future__ import annotations

import httpx
import pytest

from gridml.client import ApiClient
from gridml.errors import ConflictError, NotFoundError, SpecError, StoreError
from gridml.store import EpochReport


def client(replies: list[httpx.Response], seen: list[httpx.Request]) -> ApiClient:
    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return replies.pop(0)

    return ApiClient("http://api.test", token="gmt_x", transport=httpx.MockTransport(handler),
                     retries=3, backoff=0.001)


@pytest.mark.parametrize(("status", "error"), [(404, NotFoundError), (409, ConflictError),
                                               (422, SpecError), (401, StoreError),
                                               (403, StoreError), (400, StoreError)])
def test_statuses_become_gridml_errors_with_the_servers_hint(status, error):
    seen: list[httpx.Request] = []
    api = client([httpx.Response(status, json={"detail": "nope", "hint": "do this"})], seen)
    with pytest.raises(error) as err:
        api.get_study("s")
    assert "nope" in str(err.value) and err.value.hint and len(seen) == 1


def test_auth_errors_without_hint_get_one():
    api = client([httpx.Response(403, json={"detail": "a trial token may write only its own"})],
                 [])
    with pytest.raises(StoreError) as err:
        api.heartbeat(3)
    assert "token" in err.value.hint


def test_5xx_retried_then_succeeds_with_bearer_token():
    seen: list[httpx.Request] = []
    api = client([httpx.Response(503), httpx.Response(502),
                  httpx.Response(201, json={"trial_id": 3, "epoch": 1, "stored": True})], seen)
    assert api.post_epoch(3, EpochReport(1, {"loss": float("nan")}, 1.0)) is True
    assert len(seen) == 3 and seen[0].headers["authorization"] == "Bearer gmt_x"
    assert b'"loss":null' in seen[0].content.replace(b" ", b"")


def test_500_not_repeated_for_a_non_idempotent_write():
    seen: list[httpx.Request] = []
    api = client([httpx.Response(500, text="boom")], seen)
    with pytest.raises(StoreError, match="HTTP 500"):
        api.enqueue_trial("s", {"lr": 0.1})
    assert len(seen) == 1


def test_gives_up_after_the_retries():
    seen: list[httpx.Request] = []
    api = client([httpx.Response(503)] * 4, seen)
    with pytest.raises(StoreError, match="HTTP 503"):
        api.list_trials("s")
    assert len(seen) == 4
