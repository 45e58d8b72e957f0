"""OpenAPI links: which reply's field feeds which next request, as the document says it.

A client (an external optimizer, a generated client, schemathesis' stateful phase) reads from
the document that the ``name`` of a created study is the ``{study}`` of its ask and enqueue,
that ``/ask``'s first point is the ``hparams`` of an enqueue, that the ``id`` of an enqueued trial
is the ``{trial}`` of its epochs, finish and read. The loop of docs/server.md ("An external
optimizer") is thus in the document itself, and only the steps of that loop are linked (each
link more is one more way for a stateful fuzzer to wander off it):

    POST /api/v1/studies → POST /{study}/ask → POST /{study}/trials → POST /trials/{trial}/epochs
    → GET /trials/{trial}

Operation ids are FastAPI's (function name, path, method), as the document has them.
"""

from __future__ import annotations

from typing import Any

# the operations, by FastAPI's generated operationId
CREATE_STUDY = "create_study_api_v1_studies_post"
LIST_TRIALS = "list_trials_api_v1_studies__study__trials_get"
ENQUEUE = "enqueue_trial_api_v1_studies__study__trials_post"
ASK = "ask_api_v1_studies__study__ask_post"
GET_TRIAL = "get_trial_api_v1_trials__trial__get"
POST_EPOCH = "post_epoch_api_v1_trials__trial__epochs_post"
SHOULD_STOP = "should_stop_api_v1_trials__trial__should_stop_get"
OPERATIONS = (LIST_TRIALS, ENQUEUE, ASK, GET_TRIAL, POST_EPOCH, SHOULD_STOP)
# the operations of the optimizer's loop: sources and targets of the links
LOOP = (CREATE_STUDY, ASK, ENQUEUE, POST_EPOCH, GET_TRIAL, SHOULD_STOP)


def _link(operation: str, description: str, body: Any = None, **parameters: str) -> dict[str, Any]:
    link: dict[str, Any] = {"operationId": operation, "parameters": parameters,
                            "description": description}
    if body is not None:
        link["requestBody"] = body
    return link


def _study_links(study: str) -> dict[str, Any]:
    """The next steps of an optimizer on one study, ``study`` the expression of its name."""
    return {
        "Ask": _link(ASK, "points proposed by the study's searcher", study=study),
        "EnqueueTrial": _link(ENQUEUE, "enqueue a point (an external optimizer's)", study=study),
    }


def _trial_links(trial: str) -> dict[str, Any]:
    """The next steps on one trial, ``trial`` the expression giving its id."""
    return {
        "PostEpoch": _link(POST_EPOCH, "report an epoch of the trial", trial=trial),
        "GetTrial": _link(GET_TRIAL, "the trial: state, objective", trial=trial),
    }


def links(**by_status: dict[str, Any]) -> dict[int | str, dict[str, Any]]:
    """``responses=`` entries adding ``links`` to a route's success statuses: ``s201=...``."""
    return {int(key[1:]): {"links": value} for key, value in by_status.items()}


# study name from the reply of POST /api/v1/studies
STUDY = _study_links("$response.body#/name")
# the first point /ask proposes, enqueued in the same study
ASKED = {"EnqueueProposed": {
    **_link(ENQUEUE, "enqueue the first proposed point", body={"hparams": "$response.body#/points/0"},
            study="$request.path.study"),
    # the body is this one, not merged into another (what schemathesis does unless told)
    "x-schemathesis": {"merge_body": False}}}
FIRST_TRIAL = {"GetFirstTrial": _link(GET_TRIAL, "the first trial of the page",
                                      trial="$response.body#/trials/0/id")}
# trial id from a reply that is the trial (enqueue), or the {trial} of the request (an epoch)
TRIAL = _trial_links("$response.body#/id")
REPORTED = {"GetTrial": _link(GET_TRIAL, "the trial: state, objective, epochs_done",
                              trial="$request.path.trial"),
            "ShouldStop": _link(SHOULD_STOP, "whether to go on", trial="$request.path.trial")}
