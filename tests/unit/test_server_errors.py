"""gridml.server.errors: every gridml error as (status, ErrorBody); a point outside the space
also lists each dimension in ``errors``, as a request that does not validate does."""

from __future__ import annotations

from gridml.errors import ConflictError, SearchError, SpecError
from gridml.server.errors import PointError, error_body, status_of
from gridml.server.schemas import ErrorBody
from gridml.specmodel.space import point_problems

SPACE = {"lr": {"type": "real", "low": 1e-4, "high": 0.1, "log": True},
         "act": {"type": "categorical", "choices": ["relu", "tanh"]}}


def test_a_point_outside_the_space_is_422_naming_each_dimension():
    exc = PointError(point_problems(SPACE, {"lr": 5.0, "units": 3}), hint="inside, please")
    body = error_body(exc)
    assert status_of(exc) == 422 and ErrorBody.model_validate(body)
    assert body["detail"].splitlines()[0].startswith("hparams.units: not in search.space")
    assert [(e["loc"], e["type"]) for e in body["errors"]] == [
        (["body", "hparams", "units"], "outside_space"), (["body", "hparams", "lr"], "outside_space"),
        (["body", "hparams", "act"], "outside_space")]
    assert body["errors"][1]["msg"] == "5.0 is outside [0.0001, 0.1]; give a value within the range"
    unnamed = error_body(PointError("a point must be a mapping"))["errors"]
    assert unnamed == [{"loc": ["body", "hparams"], "msg": "a point must be a mapping",
                        "type": "outside_space"}]


def test_state_conflicts_are_409_and_other_content_errors_have_no_field_list():
    assert status_of(ConflictError("study 's' is closed")) == 409
    assert status_of(SearchError("no search.space")) == 409
    assert "errors" not in error_body(SpecError("invalid spec: spec.search: ..."))
