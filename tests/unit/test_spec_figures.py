"""The spec keys of weights, collections and figures of merit (gridml/specmodel), and the trial
document the planner builds from them (the payload reads it back)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gridml.errors import SpecError
from gridml.planner import trial_document
from gridml.spec import load_spec
from gridml.store.records import Study, Trial
from payloads.runtime import trial as contract

SPEC = """\
name: demo
payload:
  model: pnet.py
  framework: torch
data:
  train: user.demo:t
  validation: user.demo:v
  weights: w
  inputs:
    - jets
    - {name: points, collection: tracks, columns: [eta, phi]}
    - tracks
training:
  epochs: 2
  class_weights: balanced
  discriminant: {signal: 0, background: [1, 2], fractions: {1: 0.1}}
search:
  objective: val_rejection_at_50
  direction: maximize
  algorithm: random
  constraints: ["val_auc >= 0.6"]
  space:
    learning_rate: {type: real, low: 0.0001, high: 0.1, log: true}
"""


def _load(tmp_path: Path, text: str = SPEC):
    (tmp_path / "pnet.py").write_text("def build_model(hparams, input_shape):\n    return None\n")
    (tmp_path / "spec.yaml").write_text(text)
    return load_spec(tmp_path / "spec.yaml")


def test_the_keys_reach_the_trial_document(tmp_path: Path) -> None:
    loaded = _load(tmp_path)
    spec = loaded.spec
    assert "rejection_at_50" in spec.training.metrics and "auc" in spec.training.metrics
    doc = trial_document(loaded, Study(1, "demo", {}, "h"), Trial(5, 1, 0, {"learning_rate": 0.01}),
                         train=["/d/t.h5"], validation=["/d/v.h5"], inputs=[], output_dir="/o",
                         api=None)
    assert doc.data.features == ("jets", "points", "tracks")
    assert doc.data.collections == ("jets", "tracks") and doc.data.weights == "w"
    assert doc.data.views == ({"name": "points", "collection": "tracks",
                               "columns": ["eta", "phi"]},)
    assert doc.training.class_weights == "balanced"
    assert doc.training.discriminant == {"signal": 0, "background": [1, 2],
                                         "fractions": {"1": 0.1}}
    path = tmp_path / "trial.json"
    path.write_text(doc.dumps())
    back = contract.load_trial(path)
    assert back.data.views == doc.data.views and back.training.discriminant["signal"] == 0


def test_class_weights_as_a_mapping(tmp_path: Path) -> None:
    loaded = _load(tmp_path, SPEC.replace("class_weights: balanced", "class_weights: {0: 1, 1: 3.5}"))
    assert loaded.spec.training.class_weights == {0: 1.0, 1: 3.5}


@pytest.mark.parametrize(("old", "new", "where"), [
    ("  weights: w\n", "  weights: w\n  weigths: w\n", "weigths"),
    ("class_weights: balanced", "class_weights: equal", "class_weights"),
    ("{name: points, collection: tracks, columns: [eta, phi]}",
     "{name: points, collection: tracks, columns: [eta], colour: red}", "colour"),
    ("{name: points, collection: tracks,", "{name: points, collection: hits,", "hits"),
    ("fractions: {1: 0.1}}", "fractions: {1: 0.1}, mode: x}", "mode"),
    ("  weights: w\n", "  weights: w\n  features: x\n", "features or inputs"),
])
def test_unknown_or_bad_keys_are_refused(tmp_path: Path, old: str, new: str, where: str) -> None:
    with pytest.raises(SpecError) as exc:
        _load(tmp_path, SPEC.replace(old, new))
    assert where in str(exc.value)


def test_the_payload_refuses_unknown_trial_fields() -> None:
    with pytest.raises(Exception, match="data.collection"):
        contract.TrialDoc.from_json({"trial_id": 1, "model_file": "m.py", "output_dir": "o",
                                     "training": {}, "data": {"collection": ["t"]}})
