"""A study's stored spec read back typed (gridml.specmodel.stored_spec / gridml.store.spec.spec_of):
whole resolved specs round-trip, older or partial ones take the model's defaults, nothing raises,
and the models' floor imports nothing of gridml above it."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from gridml.errors import SearchError
from gridml.spec import load_spec
from gridml.specmodel import Search, Spec, StoredSpec, stored_search, stored_spec
from gridml.store import EpochReport, Study
from gridml.store.best import direction_of, scores_of
from gridml.store.spec import search_of, spec_of

from tests.unit.test_spec import GOOD, write_spec

ROOT = Path(__file__).resolve().parents[2]


def study(spec: object) -> Study:
    return Study(id=1, name="s", spec=spec, spec_hash="h")  # type: ignore[arg-type]


def test_a_resolved_spec_reads_back_as_the_spec_it_was(tmp_path: Path) -> None:
    loaded = load_spec(write_spec(tmp_path, GOOD))
    resolved = json.loads(json.dumps(loaded.resolved()))  # as the database gives it back
    view = spec_of(study({**resolved, "x_model_source": "def build_model(h, s): ..."}))
    assert view.problems == []
    assert view.search == loaded.spec.search
    assert view.training == loaded.spec.training and view.resources == loaded.spec.resources
    assert view.output.dataset == loaded.output_dataset
    assert view.payload is not None and view.payload.model == str(tmp_path / "mlp.py")
    assert view.name == "demo"


def test_an_older_store_lacking_fields_takes_the_models_defaults(tmp_path: Path) -> None:
    resolved = load_spec(write_spec(tmp_path, GOOD)).resolved()
    for section, key in (("search", "objectives"), ("search", "constraints"),
                         ("search", "warm_start"), ("search", "max_trials"),
                         ("resources", "nodes"), ("payload", "framework")):
        del resolved[section][key]
    del resolved["output"]
    view = stored_spec(resolved)
    assert view.problems == []
    assert view.search.objectives == [] and view.search.constraints == []
    # the default is the model's own: stated once
    assert view.search.max_trials == Search.model_fields["max_trials"].default == 8
    assert view.resources.nodes == 1 and view.payload is not None
    assert view.payload.framework == "keras" and view.output.dataset is None


def test_a_study_made_over_the_api_holds_only_search() -> None:
    view = spec_of(study({"search": {"algorithm": "random", "direction": "maximize",
                                     "space": {"u": {"type": "int", "low": 8, "high": 64}}}}))
    assert view.payload is None and view.data is None and view.training is None
    assert view.search.direction == "maximize" and view.search.objective == "val_loss"
    assert view.search.space_dict() == {"u": {"type": "int", "low": 8, "high": 64, "log": False}}
    assert "max_trials" not in view.search.model_fields_set  # given or not: still known
    assert view.backend.executor == "local"


@pytest.mark.parametrize("raw", [None, [], "x", {"search": 5}, {"search": {"space": []}},
                                 {"search": {"objectives": [{"direction": "up"}, 3]}},
                                 {"payload": {"framework": "jax"}, "training": {"epochs": 0}},
                                 {"search": {"space": {"a": {"type": "nope"}}}, "name": 7}])
def test_a_malformed_stored_spec_never_raises(raw: object) -> None:
    view = stored_spec(raw)
    assert isinstance(view, StoredSpec) and view.search.direction == "minimize"
    assert view.search.goals() == [("val_loss", "minimize")]
    if isinstance(raw, dict) and raw:
        assert view.problems  # what was left out is said


def test_a_bad_value_is_left_out_and_said() -> None:
    view = stored_spec({"search": {"direction": "sideways", "max_trials": 3,
                                   "space": {"a": {"type": "real", "low": 0, "high": 1, "lw": 2},
                                             "b": {"type": "categorical", "choices": [1, 2]}}}})
    assert view.search.direction == "minimize" and view.search.max_trials == 3
    assert view.search.space_dict()["a"] == {"type": "real", "low": 0.0, "high": 1.0, "log": False}
    assert [p.split(":")[0] for p in view.problems] == ["search.direction", "search.space.a.lw"]
    assert direction_of(study({"search": {"direction": "sideways"}})) == "minimize"


def test_the_first_of_several_objectives_is_primary_when_read_back() -> None:
    raw = {"search": {"objectives": [{"metric": "val_auc", "direction": "maximize"},
                                     {"metric": "inference_ms"}], "constraints": ["model_mb < 3"]}}
    s = search_of(study(raw))
    assert (s.objective, s.direction) == ("val_auc", "maximize")
    assert s.goals() == stored_search(raw["search"]).goals() == [("val_auc", "maximize"),
                                                            ("inference_ms", "minimize")]
    epochs = [EpochReport(1, {"val_auc": 0.9, "inference_ms": 2.0, "model_mb": 4.0}, 1.0)]
    assert scores_of(epochs, s) == scores_of(epochs, raw["search"]) == {
        "objective": 0.9, "objectives": [0.9, 2.0], "violations": [1.0]}


def test_stored_search_keeps_a_typed_section_as_it_is(tmp_path: Path) -> None:
    search = load_spec(write_spec(tmp_path, GOOD)).spec.search
    assert stored_search(search) is search
    assert stored_search(search.model_dump(mode="json")) == search


def test_the_strict_models_still_refuse_what_the_view_reads(tmp_path: Path) -> None:
    raw = load_spec(write_spec(tmp_path, GOOD)).resolved()
    raw["search"]["parallel"] = 99  # more than max_trials: refused on submit, read back anyway
    assert stored_spec(raw).search.parallel == 99
    with pytest.raises(ValueError, match="parallel: 99 is more than max_trials"):
        Spec.model_validate(raw)


def test_the_server_refuses_a_search_space_that_does_not_read_back() -> None:
    from gridml.server.searching import search_section

    with pytest.raises(SearchError, match=r"no search.space.*search.space.a.type"):
        search_section(study({"search": {"space": {"a": {"type": "nope"}}}}))
    with pytest.raises(SearchError, match="no search.space"):
        search_section(study({"name": "only-a-name"}))
    ok = search_section(study({"search": {"algorithm": "external", "space": {}}}))
    assert ok.algorithm == "external" and ok.space == {}


def test_the_models_floor_imports_nothing_of_gridml_above_it() -> None:
    code = textwrap.dedent("""
        import json, sys, gridml.specmodel
        print(json.dumps(sorted(m for m in sys.modules if m.startswith("gridml."))))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                         check=True).stdout
    loaded = json.loads(out)
    assert loaded and all(m.startswith("gridml.specmodel") for m in loaded), loaded
