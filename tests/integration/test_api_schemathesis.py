"""The published OpenAPI document is true to the server: schemathesis with ALL its checks.

`st run --checks all` (schemathesis' own CLI, every phase: examples, coverage, fuzzing and the
STATEFUL phase, seed ``SEED``) against `gridml serve` as its own process, over real HTTP: no
server error, every status answered is documented, every body matches its documented schema
(errors included: one `ErrorBody`), schema-valid requests are accepted and schema-violating ones
refused, `Allow` on 405 names exactly the route's methods, no use-after-free ... SQLite (closed
reads, the group deployment) and PostgreSQL (open reads). Half of the generated study/trial path
parameters are replaced by real ones, so the requests reach past the 404s into the handlers.

The stateful phase follows the document's OpenAPI links (``gridml.server.links``): create a
study → ask its searcher → enqueue the proposed point → report an epoch → get the trial. The
client keeps tokens as an external optimizer does (``tests/integration/schemathesis_hooks.py``:
the admin token to create, the created study's token for that study and its trials); the test
asserts that the chain ran (a study created by the stateful phase holds a trial with an epoch).
The stateful phase runs on the operations of that loop only (the others have no links; every
phase before it covers them) and on the document's links only (no inferred ones), so that its
scenarios stay on the loop. Bounded: ``GRIDML_FUZZ_EXAMPLES`` cases per operation and phase
(default 4), ``GRIDML_FUZZ_SCENARIOS`` stateful scenarios (default 100) of at most ``STEPS``
steps: 732 cases, 11 scenarios with this seed, the same on both databases.

The refusals a static document cannot make a schema of are documented with their status and
error body (docs/server.md, "Errors"), and allowed here for positive data as schemathesis
prescribes for such rules (``positive_data_acceptance.expected-statuses`` of the operation):
a point outside *that study's* ``search.space`` (``POST /api/v1/studies/{study}/trials``) and a
spec that `gridml validate` refuses (``POST /api/v1/studies``) are 422.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from gridml.client import ApiClient
from gridml.server.links import LOOP
from gridml.server.process import ServerProcess
from gridml.settings import read_admin_token, settings
from gridml.store import EpochReport
from gridml.store.sql import SqlStore
from tests.conftest import database

pytestmark = [pytest.mark.service, pytest.mark.slow]

SPEC = {"search": {"algorithm": "random", "objective": "val_loss", "seed": 1, "max_trials": 50,
                   "early_stopping": {"rule": "median", "min_epochs": 1},
                   "space": {"lr": {"type": "real", "low": 1e-4, "high": 0.1, "log": True},
                             "act": {"type": "categorical", "choices": ["relu", "tanh"]}}}}
SEED = 20261123
EXAMPLES = int(os.environ.get("GRIDML_FUZZ_EXAMPLES", "4"))
STEPS = 8
SCENARIOS = int(os.environ.get("GRIDML_FUZZ_SCENARIOS", "100"))
HOOKS = "tests.integration.schemathesis_hooks"

CONFIG = """
[dictionaries.studies]
values = [{study!r}, "{study_id}"]

[dictionaries.trials]
values = {trials}

[parameters]
"path.study" = {{ dictionary = "studies", probability = 0.5 }}
"path.trial" = {{ dictionary = "trials", probability = 0.5 }}

[phases.stateful]
max-steps = {steps}
link-calibration = false

[phases.stateful.generation]
max-examples = {scenarios}

[phases.stateful.inference]
algorithms = []

[[operations]]
exclude-operation-id = {loop}
phases.stateful.enabled = false

[[operations]]
include-path = "/api/v1/studies/{{study}}/trials"
include-method = "POST"
checks.positive_data_acceptance.expected-statuses = ["2XX", "401", "403", "404", "409", "422"]

[[operations]]
include-path = "/api/v1/studies"
include-method = "POST"
checks.positive_data_acceptance.expected-statuses = ["2XX", "401", "403", "409", "422"]
"""


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def live(request, tmp_path_factory):
    """`gridml serve` with one study holding two trials with epochs; yields
    (url, database url, environment for `st`, config)."""
    tmp = tmp_path_factory.mktemp("fuzz")
    open_reads = request.param == "postgresql"
    with database(request.param, request.getfixturevalue("pg_server"), tmp / "gridml.db") as url:
        server = ServerProcess(url, log=tmp / "serve.log", open_reads=open_reads).start()
        try:
            owner = ApiClient(server.url)
            study = owner.create_study("fuzzed", SPEC)
            trials = [owner.enqueue_trial("fuzzed", {"lr": 0.01, "act": a})["id"]
                      for a in ("relu", "tanh")]
            for tid in trials:
                owner.post_epoch(tid, EpochReport(1, {"val_loss": 0.5, "loss": 0.4}, 1.0))
            config = tmp / "schemathesis.toml"
            config.write_text(CONFIG.format(study=study["name"], study_id=study["id"],
                                            trials=json.dumps(trials), steps=STEPS,
                                            scenarios=SCENARIOS, loop=json.dumps(LOOP)))
            env = {**os.environ, "SCHEMATHESIS_HOOKS": HOOKS, "GRIDML_FUZZ_TOKEN": owner.token,
                   "GRIDML_FUZZ_ADMIN": read_admin_token(settings().admin_token_file) or "",
                   "GRIDML_FUZZ_SPEC": json.dumps(SPEC),
                   "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parents[2]),
                                                  os.environ.get("PYTHONPATH", "")])}
            yield server.url, url, env, config
        finally:
            server.stop()
        assert "Traceback" not in (tmp / "serve.log").read_text()


def test_openapi_document_is_true_to_the_server(live, tmp_path):
    url, db_url, env, config = live
    assert env["GRIDML_FUZZ_ADMIN"]
    st = Path(sys.executable).with_name("st")
    args = [str(st), "--config-file", str(config), "--no-color", "run", f"{url}/openapi.json",
            "--checks", "all", "--phases", "examples,coverage,fuzzing,stateful",
            "--max-examples", str(EXAMPLES), "--seed", str(SEED), "--workers", "1",
            "--generation-database", "none", "--request-timeout", "30",
            "--report", "junit", "--report-dir", str(tmp_path)]
    run = subprocess.run(args, capture_output=True, text=True, timeout=900, cwd=tmp_path, env=env)
    out = run.stdout + run.stderr
    document = httpx.get(f"{url}/openapi.json", timeout=30).json()
    operations = sum(1 for item in document["paths"].values() for method in item
                     if method in ("get", "post", "put", "patch", "delete"))
    assert operations >= 16  # the routes of docs/server.md at least
    assert f"{operations} selected / {operations} total" in out, out[-3000:]  # every operation
    assert run.returncode == 0, out[-12000:]
    # the stateful phase ran scenarios along the document's links, not only inferred ones
    scenarios = re.search(r"Scenarios:\s+(\d+)", out)
    links = re.search(r"API Links:\s+(\d+) covered / (\d+) selected", out)
    assert scenarios and int(scenarios.group(1)) > 0, out[-3000:]
    assert links and int(links.group(1)) > 0, out[-3000:]
    cases = re.search(r"Test cases:\s+(\d+) generated", out)
    phases = re.findall(r"(Examples|Coverage|Fuzzing|Stateful) \(in ([\d.]+)s\)", out)
    print(f"schemathesis: {cases.group(1) if cases else '?'} cases; stateful: {scenarios.group(1)} "
          f"scenarios, links {links.group(1)} covered of {links.group(2)}; phases {phases}")
    # ... and the chain went through: a study it created holds a trial with a reported epoch
    store = SqlStore(db_url)
    try:
        created = [s for s in store.list_studies() if s.name != "fuzzed"]
        assert any(store.study_epochs(s.id) for s in created), \
            f"{len(created)} studies created, none with a trial with an epoch\n{out[-3000:]}"
    finally:
        store.close()


def test_state_dependent_refusals_are_documented_with_their_body(live):
    """A point outside the study's space: 422 naming each dimension in `errors`; the same
    enqueue to the closed study: 409; both statuses with `ErrorBody` in the document, and the
    links the stateful phase follows are there."""
    url, _, env, _ = live
    owner = ApiClient(url, token=env["GRIDML_FUZZ_ADMIN"])  # GRIDML_HOME is per test
    owner.create_study("refusals", SPEC)
    headers = {"Authorization": f"Bearer {owner.token}"}
    point = {"hparams": {"lr": 5.0, "act": "relu", "units": 3}}
    bad = httpx.post(f"{url}/api/v1/studies/refusals/trials", json=point, headers=headers)
    body = bad.json()
    assert bad.status_code == 422 and body["detail"].startswith("hparams.units: not in"), body
    assert {(tuple(e["loc"]), e["type"]) for e in body["errors"]} == {
        (("body", "hparams", "units"), "outside_space"), (("body", "hparams", "lr"), "outside_space")}
    assert "search.space" in body["hint"]
    assert httpx.post(f"{url}/api/v1/studies/refusals/close", headers=headers).status_code == 200
    late = httpx.post(f"{url}/api/v1/studies/refusals/trials", headers=headers,
                      json={"hparams": {"lr": 0.01, "act": "relu"}})
    assert late.status_code == 409 and set(late.json()) == {"detail", "hint"}
    document = httpx.get(f"{url}/openapi.json").json()
    enqueue = document["paths"]["/api/v1/studies/{study}/trials"]["post"]["responses"]
    for status, words in (("422", "outside the study's search.space"), ("409", "closed")):
        assert words in enqueue[status]["description"]
        assert enqueue[status]["content"]["application/json"]["schema"]["$ref"] \
            == "#/components/schemas/ErrorBody"
    created = document["paths"]["/api/v1/studies"]["post"]["responses"]["201"]["links"]
    asked = document["paths"]["/api/v1/studies/{study}/ask"]["post"]["responses"]["200"]["links"]
    assert created["Ask"]["parameters"] == {"study": "$response.body#/name"}
    assert asked["EnqueueProposed"]["requestBody"] == {"hparams": "$response.body#/points/0"}
    assert set(enqueue["201"]["links"]) >= {"PostEpoch", "GetTrial"}
