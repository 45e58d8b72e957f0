"""The spec loader refuses every kind of bad spec before anything runs, naming file:line: field."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
import yaml

from gridml.errors import SpecError
from gridml.spec import json_schema, load_spec

MODEL = "def build_model(hparams, input_shape):\n    return None\n"


def write_spec(tmp_path: Path, text: str, model: str = MODEL) -> Path:
    (tmp_path / "mlp.py").write_text(model)
    path = tmp_path / "spec.yaml"
    path.write_text(textwrap.dedent(text))
    return path


GOOD = """\
name: demo
payload:
  model: mlp.py
data:
  train: user.demo:t
  validation: user.demo:v
training:
  epochs: 2
  workers: 2
  metrics: [accuracy, auc]
search:
  algorithm: bayes
  objective: val_loss
  max_trials: 4
  parallel: 2
  space:
    learning_rate: {type: real, low: 1.0e-4, high: 1.0e-1, log: true}
    units: {type: int, low: 8, high: 64}
    activation: {type: categorical, choices: [relu, tanh]}
resources: {cores: 2}
"""


def refused(tmp_path: Path, text: str, **kw: object) -> list[str]:
    with pytest.raises(SpecError) as info:
        load_spec(write_spec(tmp_path, text, **kw))  # type: ignore[arg-type]
    return info.value.problems


def test_good_spec_loads_with_defaults(tmp_path: Path) -> None:
    loaded = load_spec(write_spec(tmp_path, GOOD))
    assert loaded.spec.search.space["units"].type == "int"
    assert loaded.spec.backend.executor == "local"
    assert loaded.output_dataset == "user.demo:demo.out"
    assert loaded.resolved()["payload"]["model"] == str(tmp_path / "mlp.py")
    assert loaded.spec.resources.walltime_s == 3600


def test_hash_ignores_parallelism_but_not_the_space(tmp_path: Path) -> None:
    h1 = load_spec(write_spec(tmp_path, GOOD)).hash
    h2 = load_spec(write_spec(tmp_path, GOOD.replace("parallel: 2", "parallel: 1"))).hash
    h3 = load_spec(write_spec(tmp_path, GOOD.replace("high: 64", "high: 65"))).hash
    assert h1 == h2 != h3


@pytest.mark.parametrize("old,new,line,field,words", [
    ("  epochs: 2\n", "  epochs: 2\n  epoch: 3\n", 9, "training.epoch", "unknown key"),
    ("epochs: 2", "epochs: two", 8, "training.epochs", "integer"),
    ("high: 64", "high: 4", 18, "search.space.units.high", "inverted"),
    ("low: 8, high: 64", "low: 8, high: 8", 18, "search.space.units.high", "inverted"),
    ("low: 1.0e-4", "low: 0.0", 17, "search.space.learning_rate.low", "> 0 for a log range"),
    ("parallel: 2", "parallel: 9", 15, "search.parallel", "max_trials"),
    ("workers: 2", "workers: 3", 9, "training.workers", "resources.cores"),
    ("algorithm: bayes", "algorithm: genetic", 12, "search.algorithm", "bayes"),
    ("objective: val_loss", "objective: val_f1", 13, "search.objective", "not reported"),
    ("choices: [relu, tanh]", "choices: []", 19, "search.space.activation.choices", "non-empty"),
    ("name: demo", "name: Demo Study", 1, "name", "pattern"),
    ("model: mlp.py", "model: nope.py", 3, "payload.model", "does not exist"),
])
def test_bad_specs_are_refused_with_place_and_fix(tmp_path: Path, old: str, new: str, line: int,
                                                  field: str, words: str) -> None:
    assert old in GOOD
    problems = refused(tmp_path, GOOD.replace(old, new, 1))
    hit = [p for p in problems if f"spec.yaml:{line}: {field}:" in p]
    assert hit, problems
    assert words in hit[0]


def test_model_without_build_model(tmp_path: Path) -> None:
    problems = refused(tmp_path, GOOD, model="def make(h):\n    pass\n")
    assert "payload.model" in problems[0] and "build_model" in problems[0]


def test_model_with_syntax_error(tmp_path: Path) -> None:
    problems = refused(tmp_path, GOOD, model="def build_model(h, s)\n    pass\n")
    assert "syntax error" in problems[0] and ":1:" in problems[0]


def test_missing_section_and_yaml_errors(tmp_path: Path) -> None:
    problems = refused(tmp_path, GOOD.replace("resources: {cores: 2}\n", "").split("search:")[0]
                       + "resources: {cores: 2}\n")
    assert any("search: required field is missing" in p for p in problems)
    problems = refused(tmp_path, GOOD + "  bad: [unclosed\n")
    assert "not valid YAML" in problems[0]
    problems = refused(tmp_path, GOOD + "name: again\n")
    assert "duplicate key" in problems[0]


def test_unknown_dids_are_refused(tmp_path: Path) -> None:
    path = write_spec(tmp_path, GOOD.replace("user.demo:v", "user.demo:../etc"))
    with pytest.raises(SpecError) as info:
        load_spec(path, did_exists=lambda did: did == "user.demo:t")
    text = "\n".join(info.value.problems)
    assert "data.validation" in text and "malformed DID" in text
    with pytest.raises(SpecError) as info:
        load_spec(write_spec(tmp_path, GOOD), did_exists=lambda did: did == "user.demo:t")
    assert "user.demo:v not found" in info.value.problems[0]
    assert "gridml data put" in info.value.problems[0]


def test_json_schema_describes_the_spec() -> None:
    schema = json_schema()
    assert set(schema["required"]) >= {"name", "payload", "data", "training", "search"}
    assert schema["additionalProperties"] is False


def test_quickstart_example_is_valid(repo_root: Path) -> None:
    loaded = load_spec(repo_root / "examples" / "quickstart.yaml")
    assert yaml.safe_load((repo_root / "examples" / "quickstart.yaml").read_text())["name"] == loaded.spec.name


def test_unknown_search_option_is_refused(tmp_path: Path) -> None:
    problems = refused(tmp_path, GOOD.replace("  parallel: 2\n", "  parallel: 2\n  options: {n_initial: 3}\n"))
    assert any("search.options" in p and "n_initial" in p for p in problems), problems
