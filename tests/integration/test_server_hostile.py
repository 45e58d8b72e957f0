"""`gridml serve` against a hostile client, over real HTTP: study creation needs the admin token
(printed at start, kept 0600), every spec is checked as `gridml validate` checks one (422 naming
the field, never a 500), bodies over the size limit get 413 naming it, JSON nested too deep gets
a 4xx naming the depth limit; the server stays healthy and logs no traceback. Bounded counts,
loopback only."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from gridml.client import ApiClient
from gridml.server.process import ServerProcess, free_port
from gridml.settings import read_admin_token
from tests.helpers import ROOT, gridml

pytestmark = pytest.mark.service

SEARCH = {"algorithm": "random", "objective": "val_loss", "seed": 1, "max_trials": 4,
          "space": {"lr": {"type": "real", "low": 1e-4, "high": 0.1, "log": True}}}
MIB = 1024 * 1024


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("hostile")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("GRIDML_HOME", str(tmp / "home"))
        mp.delenv("GRIDML_ADMIN_TOKEN", raising=False)
        server = ServerProcess(f"sqlite:///{tmp / 'gridml.db'}", log=tmp / "serve.log").start()
        try:
            token = read_admin_token(tmp / "home" / "admin-token")
            assert token, (tmp / "serve.log").read_text()
            yield {"url": server.url, "token": token, "home": tmp / "home",
                   "log": tmp / "serve.log"}
        finally:
            server.stop()
    text = (tmp / "serve.log").read_text()
    assert "Traceback" not in text, text[-3000:]


def post(served: dict[str, Any], path: str, body: Any = None, *, token: str | None = None,
         content: bytes | None = None, **kw: Any) -> httpx.Response:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    if content is not None:
        headers["Content-Type"] = "application/json"
        return httpx.post(f"{served['url']}{path}", content=content, headers=headers,
                          timeout=60, **kw)
    return httpx.post(f"{served['url']}{path}", json=body, headers=headers, timeout=60, **kw)


def create(served: dict[str, Any], name: str, spec: Any, token: str | None = "admin") -> httpx.Response:
    given = served["token"] if token == "admin" else token
    return post(served, "/api/v1/studies", {"name": name, "spec": spec}, token=given)


# ---- the admin token ---------------------------------------------------------------------------
def test_the_admin_token_is_printed_and_kept_readable_by_the_user_only(served) -> None:
    path = served["home"] / "admin-token"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert served["token"] in served["log"].read_text()  # printed at start


def test_creating_a_study_needs_the_admin_token(served) -> None:
    refused = [create(served, "no-token", {"search": SEARCH}, token=None),
               create(served, "bad-token", {"search": SEARCH}, token="gma_not-the-token-at-all"),
               create(served, "empty", {"search": SEARCH}, token="x")]
    for reply in refused:
        assert reply.status_code in (401, 403), reply.text
        assert "admin token" in reply.json()["detail"]
    made = create(served, "with-token", {"search": SEARCH})
    assert made.status_code == 201, made.text
    study_token = made.json()["token"]
    reply = create(served, "study-token", {"search": SEARCH}, token=study_token)
    assert reply.status_code == 401, reply.text  # a study token does not create studies
    for name in ("no-token", "bad-token", "empty", "study-token"):
        assert httpx.get(f"{served['url']}/api/v1/studies/{name}").status_code == 404


def test_the_client_sends_the_admin_token_of_a_server_on_this_machine(served) -> None:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("GRIDML_HOME", str(served["home"]))
        created = ApiClient(served["url"], retries=0).create_study("by-client", {"search": SEARCH})
        assert created["token"].startswith("gms_")
    with pytest.MonkeyPatch.context() as mp:  # another home, the token given by the environment
        mp.setenv("GRIDML_ADMIN_TOKEN", served["token"])
        assert ApiClient(served["url"], retries=0).create_study("by-env", {"search": SEARCH})


# ---- specs: 422 naming the field, never 5xx -----------------------------------------------------
MALFORMED = [
    ({"backend": "x"}, "spec.backend"),
    ({"backend": {"executor": "x"}}, "spec.backend.executor"),
    ({"backend": {"executor": "slurm"}}, "needs the whole spec"),
    ({"backend": []}, "spec.backend"),
    ({"search": 5}, "spec.search"),
    ({"search": []}, "spec.search"),
    ({"search": "random"}, "spec.search"),
    ({"search": {"space": []}}, "spec.search.space"),
    ({"search": {"space": {"lr": 5}}}, "spec.search.space.lr"),
    ({"search": {"space": {"lr": {"type": "real", "low": 1, "high": 0}}}}, "spec.search.space.lr"),
    ({"search": {"algorithm": "nope", "space": SEARCH["space"]}}, "spec.search.algorithm"),
    ({"search": {**SEARCH, "options": {"bogus": 1}}}, "spec.search.options"),
    ({"search": {**SEARCH, "max_trials": -1}}, "spec.search.max_trials"),
    ({"search": {**SEARCH, "early_stopping": {"rule": "nope"}}}, "spec.search.early_stopping"),
    ({"search": {**SEARCH, "early_stopping": []}}, "spec.search.early_stopping"),
    ({"training": []}, "spec.training"),
    ({"resources": {"walltime": 0}}, "spec.resources.walltime"),
    ({"resources": {"walltime": -5}}, "spec.resources.walltime"),
    ({"slurm": {"partition": "gpu\n#SBATCH --uid=0"}}, "spec.slurm.partition"),
    ({"slurm": {"options": {"a b": 1}}}, "spec.slurm.options"),
    ({"slurm": {"options": []}}, "spec.slurm.options"),
    ({"panda": {"site": "X; rm -rf /"}}, "spec.panda.site"),
    ({"nonsense": 1}, "spec.nonsense"),
    ({"name": "Not A Name"}, "spec.name"),
    ({"x_model_source": 5}, "spec.x_model_source"),
]


@pytest.mark.parametrize("spec,field", MALFORMED, ids=[str(i) for i in range(len(MALFORMED))])
def test_a_malformed_spec_is_422_naming_the_field(served, spec: Any, field: str) -> None:
    reply = create(served, "malformed", spec)
    assert reply.status_code == 422, reply.text
    assert field in reply.json()["detail"], reply.json()
    assert httpx.get(f"{served['url']}/api/v1/studies/malformed").status_code == 404


@pytest.mark.parametrize("body", [{"name": "x", "spec": []}, {"name": "x", "spec": "s"},
                                  {"name": "x", "spec": 5}, [], "x", {"name": ["x"]},
                                  {"name": "x\n", "spec": {}}])
def test_a_malformed_body_is_422(served, body: Any) -> None:
    reply = post(served, "/api/v1/studies", body, token=served["token"])
    assert reply.status_code == 422, reply.text
    assert reply.json()["detail"]


def test_a_whole_spec_is_checked_like_validate_does(served) -> None:
    whole = {"name": "whole", "payload": {"model": "/nowhere/model.py"},
             "data": {"train": "user.t:train", "validation": "user.t:val"},
             "training": {"epochs": 1, "metrics": ["accuracy"]},
             "search": {**SEARCH, "objective": "val_nope"},
             "backend": {"executor": "local"}}  # (the server's controller leaves it)
    reply = create(served, "whole", whole)
    assert reply.status_code == 422 and "spec.search.objective" in reply.json()["detail"], reply.text
    whole["search"] = SEARCH
    assert create(served, "whole", whole).status_code == 201


# ---- size and depth limits ----------------------------------------------------------------------
def test_a_20_mb_body_is_413_naming_the_limit(served) -> None:
    big = {"name": "big", "spec": {"search": SEARCH, "x_model_source": "#" * (20 * MIB)}}
    reply = post(served, "/api/v1/studies", big, token=served["token"])
    assert reply.status_code == 413, reply.text[:300]
    assert "8 MiB" in reply.json()["detail"]
    # without a Content-Length (chunked): refused as it grows past the limit
    chunks = (b" " * MIB for _ in range(20))
    reply = httpx.post(f"{served['url']}/api/v1/studies", content=chunks, timeout=60,
                       headers={"Authorization": f"Bearer {served['token']}",
                                "Content-Type": "application/json"})
    assert reply.status_code == 413, reply.text[:300]
    # a payload's epoch report (the lean path) too
    reply = post(served, "/api/v1/trials/1/epochs", content=b"[" + b"1," * (10 * MIB) + b"1]",
                 token="gmt_whatever")
    assert reply.status_code == 413, reply.text[:300]
    assert httpx.get(f"{served['url']}/api/v1/studies/big").status_code == 404


@pytest.mark.parametrize("path", ["/api/v1/studies", "/api/v1/trials/1/epochs",
                                  "/api/v1/studies/with-token/trials"])
def test_5000_deep_json_is_refused_naming_the_depth_limit(served, path: str) -> None:
    deep = b'{"name": "deep", "spec": ' + b"[" * 5000 + b"]" * 5000 + b"}"
    reply = post(served, path, content=deep, token=served["token"])
    assert 400 <= reply.status_code < 500, reply.text[:300]
    assert "64 levels" in reply.json()["detail"] and "depth" in reply.json()["detail"]
    objects = b'{"a":' * 5000 + b"1" + b"}" * 5000
    reply = post(served, path, content=objects, token=served["token"])
    assert 400 <= reply.status_code < 500 and "depth" in reply.json()["detail"], reply.text[:300]


def test_brackets_inside_strings_are_no_nesting(served) -> None:
    spec = {"search": SEARCH, "x_model_source": "[" * 5000 + "{" * 5000 + '\\"['}
    assert create(served, "brackets", spec).status_code == 201


def test_the_openapi_document_names_the_limits(served) -> None:
    doc = httpx.get(f"{served['url']}/openapi.json", timeout=30).json()
    create_op = doc["paths"]["/api/v1/studies"]["post"]["responses"]
    assert "413" in create_op and "limit" in create_op["413"]["description"]
    assert "64" in create_op["400"]["description"]
    assert "401" in create_op and "admin token" in create_op["401"]["description"]


def test_the_server_is_healthy_after_all_that(served) -> None:
    assert httpx.get(f"{served['url']}/api/v1/health", timeout=10).status_code == 200
    studies = httpx.get(f"{served['url']}/api/v1/studies", timeout=10).json()
    names = {s["name"] for s in studies}
    assert "with-token" in names and not names & {"malformed", "big", "deep"}


# ---- anonymous creation: loopback and an explicit flag only -----------------------------------
def test_anonymous_creation_is_refused_off_loopback(tmp_path: Path) -> None:
    proc = gridml("serve", "--host", "0.0.0.0", "--port", str(free_port()),
                  "--db", f"sqlite:///{tmp_path / 'g.db'}", "--allow-anonymous-studies",
                  check=False, timeout=60)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "--allow-anonymous-studies" in proc.stderr and "loopback" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_anonymous_creation_on_loopback_with_the_flag(tmp_path: Path) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with open(tmp_path / "serve.log", "wb") as log:
        proc = subprocess.Popen([sys.executable, "-m", "gridml.serve", "--port", str(port),
                                 "--db", f"sqlite:///{tmp_path / 'g.db'}", "--no-controller",
                                 "--allow-anonymous-studies", "--max-body", "64KiB"],
                                cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                                env=os.environ.copy(), start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while not _healthy(url):
            assert proc.poll() is None and time.monotonic() < deadline, \
                (tmp_path / "serve.log").read_text()
            time.sleep(0.1)
        reply = httpx.post(f"{url}/api/v1/studies", json={"name": "anon", "spec": {"search": SEARCH}})
        assert reply.status_code == 201, reply.text
        reply = httpx.post(f"{url}/api/v1/studies",
                           json={"name": "anon2", "spec": {"x_model_source": "#" * 100_000}})
        assert reply.status_code == 413 and "64 KiB" in reply.json()["detail"], reply.text
    finally:
        proc.terminate()
        proc.wait(30)
    assert "Traceback" not in (tmp_path / "serve.log").read_text()


def _healthy(url: str) -> bool:
    try:
        return httpx.get(f"{url}/api/v1/health", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False
