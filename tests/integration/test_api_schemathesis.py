"""The published OpenAPI document is true to the server: schemathesis with ALL its checks.

`st run --checks all` (schemathesis' own CLI, every phase: examples, coverage, fuzzing,
stateful) against `gridml serve` as its own process, over real HTTP, with a study token:
no server error, every status answered is documented, every body matches its documented schema
(errors included: one `ErrorBody`), schema-valid requests are accepted and schema-violating ones
refused, `Allow` on 405 names exactly the route's methods, no use-after-free ... SQLite (closed
reads, the group deployment) and PostgreSQL (open reads). Half of the generated study/trial path
parameters are replaced by real ones, so the requests reach past the 404s into the handlers.
Bounded: ``GRIDML_FUZZ_EXAMPLES`` cases per operation and phase (default 15; about a minute per
database on 2 busy cores).

The one exception the document cannot express: a point sent to
``POST /api/v1/studies/{study}/trials`` is checked against *that study's* ``search.space``
(per study, not in a static schema) and answered 422 when outside it, which the document says;
that operation's positive-data check therefore also expects 422.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from gridml.client import ApiClient
from gridml.server.process import ServerProcess
from gridml.store import EpochReport
from tests.conftest import database

pytestmark = [pytest.mark.service, pytest.mark.slow]

SPEC = {"search": {"algorithm": "random", "objective": "val_loss", "seed": 1, "max_trials": 50,
                   "early_stopping": {"rule": "median", "min_epochs": 1},
                   "space": {"lr": {"type": "real", "low": 1e-4, "high": 0.1, "log": True},
                             "act": {"type": "categorical", "choices": ["relu", "tanh"]}}}}
EXAMPLES = int(os.environ.get("GRIDML_FUZZ_EXAMPLES", "15"))

CONFIG = """
[dictionaries.studies]
values = [{study!r}, "{study_id}"]

[dictionaries.trials]
values = {trials}

[parameters]
"path.study" = {{ dictionary = "studies", probability = 0.5 }}
"path.trial" = {{ dictionary = "trials", probability = 0.5 }}

[[operations]]
include-path = "/api/v1/studies/{{study}}/trials"
include-method = "POST"
checks.positive_data_acceptance.expected-statuses = ["2XX", "401", "403", "404", "409", "422"]
"""


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def live(request, tmp_path_factory):
    """`gridml serve` with one study holding two trials with epochs; yields (url, token, config)."""
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
                                            trials=json.dumps(trials)))
            yield server.url, owner.token, config
        finally:
            server.stop()
        assert "Traceback" not in (tmp / "serve.log").read_text()


def test_openapi_document_is_true_to_the_server(live, tmp_path):
    url, token, config = live
    st = Path(sys.executable).with_name("st")
    args = [str(st), "--config-file", str(config), "--no-color", "run", f"{url}/openapi.json",
            "--checks", "all", "-H", f"Authorization: Bearer {token}",
            "--max-examples", str(EXAMPLES), "--seed", "1", "--workers", "1",
            "--generation-database", "none", "--request-timeout", "30",
            "--report", "junit", "--report-dir", str(tmp_path)]
    run = subprocess.run(args, capture_output=True, text=True, timeout=900, cwd=tmp_path)
    out = run.stdout + run.stderr
    document = httpx.get(f"{url}/openapi.json", timeout=30).json()
    operations = sum(1 for item in document["paths"].values() for method in item
                     if method in ("get", "post", "put", "patch", "delete"))
    assert operations >= 16  # the routes of docs/server.md at least
    assert f"{operations} selected / {operations} total" in out, out[-3000:]  # every operation
    assert run.returncode == 0, out[-12000:]
