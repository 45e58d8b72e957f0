"""schemathesis hooks for tests/integration/test_api_schemathesis.py: a client that keeps tokens.

`st run` loads this module (``SCHEMATHESIS_HOOKS=tests.integration.schemathesis_hooks``) and
behaves as an external optimizer does with gridml's API: it creates a study with the server's
admin token, keeps the study token from the reply, sends it on that study's routes and on its
trials' routes. Without this every request would carry one token, and a study created by the
stateful phase could not be used by its next step (403), so the chain the document's links
describe (create study → ask → enqueue the proposed point → report an epoch → get the trial) would
end at its first link.

Also, as the test replaces half of the generated ``{study}``/``{trial}`` by real ones, half of
the generated ``POST /api/v1/studies`` bodies (all of them in the stateful phase, whose scenarios
go on from the study created) get a spec with a search space (a random JSON object is never a
valid spec), so that the created studies can be searched and take trials.

Environment (set by the test): ``GRIDML_FUZZ_TOKEN`` the default (study) token,
``GRIDML_FUZZ_ADMIN`` the admin token, ``GRIDML_FUZZ_SPEC`` the spec (JSON), ``GRIDML_FUZZ_LOG``
a file to append each request's method, path and status to.
"""

from __future__ import annotations

import json
import os
import random
from typing import Any

import schemathesis

DEFAULT = os.environ.get("GRIDML_FUZZ_TOKEN", "")
ADMIN = os.environ.get("GRIDML_FUZZ_ADMIN", "")
SPEC = json.loads(os.environ.get("GRIDML_FUZZ_SPEC", "{}"))
LOG = os.environ.get("GRIDML_FUZZ_LOG")  # a file: each request's method, path and status
CREATE = ("POST", "/api/v1/studies")
ENQUEUE = ("POST", "/api/v1/studies/{study}/trials")
STUDIES: dict[str, str] = {}  # study name or id -> its token (studies created in this run)
TRIALS: dict[str, str] = {}  # trial id -> the token that enqueued it
CHOICE = random.Random(20261123)  # which create bodies get the real spec: the same every run


def _token(case: Any) -> str:
    if (case.method.upper(), case.path) == CREATE:
        return ADMIN
    params = case.path_parameters or {}
    return (STUDIES.get(str(params.get("study"))) or TRIALS.get(str(params.get("trial")))
            or DEFAULT)


def _stateful(case: Any) -> bool:
    meta = getattr(case, "meta", None)
    return meta is not None and str(meta.phase.name) == "stateful"


@schemathesis.hook
def before_call(context: Any, case: Any, kwargs: dict[str, Any]) -> None:
    if (case.method.upper(), case.path) == CREATE and isinstance(case.body, dict) \
            and (_stateful(case) or CHOICE.random() < 0.5):
        case.body = {**case.body, "spec": SPEC}
    case.headers = {**(case.headers or {}), "Authorization": f"Bearer {_token(case)}"}


@schemathesis.hook
def after_call(context: Any, case: Any, response: Any) -> None:
    key = (case.method.upper(), case.path)
    if LOG:
        with open(LOG, "a", encoding="utf-8", errors="backslashreplace") as out:
            body = json.dumps(case.body)[:200] if key == ENQUEUE else ""
            out.write(f"{key[0]} {case.formatted_path} {response.status_code} {body}\n")
    if response.status_code != 201 or key not in (CREATE, ENQUEUE):
        return
    body = response.json()
    if key == CREATE:
        STUDIES[body["name"]] = STUDIES[str(body["id"])] = body["token"]
    else:
        TRIALS[str(body["id"])] = _token(case)
