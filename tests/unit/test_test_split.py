"""data.test (the test split): the spec key, the trial document (written only when given), the
phpo refusal, the store's and the API's view of the test metrics, the CLI's line, and the
dashboard's ranking of the best trials' ROC curves."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from gridml.errors import SpecError
from gridml.planner import trial_document
from gridml.spec import load_spec
from gridml.store.records import Study, Trial
from payloads.runtime import trial as contract

SPEC = """\
name: demo
payload: {{model: m.py, framework: torch}}
data:
  train: user.demo:t
  validation: user.demo:v
  {test}
training: {{epochs: 1}}
search:
  objective: val_auc
  direction: maximize
  algorithm: random
  space:
    learning_rate: {{type: real, low: 0.0001, high: 0.1, log: true}}
backend: {{executor: {executor}}}
"""


def _load(tmp_path: Path, test: str = "", executor: str = "local", exists: bool = False):
    (tmp_path / "m.py").write_text("def build_model(hparams, input_shape):\n    return None\n")
    (tmp_path / "spec.yaml").write_text(SPEC.format(test=test, executor=executor))
    return load_spec(tmp_path / "spec.yaml", did_exists=(lambda d: True) if exists else None)


def _doc(loaded, test: list[str] | None):
    return trial_document(loaded, Study(1, "demo", {}, "h"), Trial(5, 1, 0, {}),
                          train=["/d/t.h5"], validation=["/d/v.h5"], inputs=[], output_dir="/o",
                          api=None, test=test)


def test_data_test_reaches_the_trial_document_only_when_given(tmp_path: Path) -> None:
    plain = _load(tmp_path)
    assert plain.spec.data.dids("test") == []
    doc = _doc(plain, [])
    assert "test" not in doc.to_json()["data"]  # an older payload reads this document
    with_test = _load(tmp_path, "test: [user.demo:e1, user.demo:e2]")
    assert with_test.spec.data.dids("test") == ["user.demo:e1", "user.demo:e2"]
    assert with_test.hash != plain.hash  # another campaign; without it, the hash of before
    doc = _doc(with_test, ["/d/e1.h5", "e2.h5"])
    assert doc.to_json()["data"]["test"] == ["/d/e1.h5", "e2.h5"]
    back = contract.TrialDoc.from_json(doc.to_json(), base=tmp_path)
    assert back.data.test == ("/d/e1.h5", str(tmp_path / "e2.h5"))


def test_phpo_refuses_a_test_split_in_one_line(tmp_path: Path) -> None:
    with pytest.raises(SpecError) as err:
        _load(tmp_path, "test: user.demo:e", executor="phpo", exists=True)
    assert "data.test" in str(err.value) and "executor local, slurm or panda" in str(err.value)
    for executor in ("local", "panda"):  # fine locally and through PanDA (stream IN3)
        _load(tmp_path, "test: user.demo:e", executor=executor, exists=True)


def test_test_metrics_in_the_api_schema_and_the_cli_line() -> None:
    from gridml.report import test_line, trial_summary
    from gridml.server.schemas import TrialOut

    trial = Trial(1, 1, 0, {}, state="completed", objective=0.8,
                  test_metrics={"auc": 0.75, "rejection_at_50": math.inf, "loss": math.nan})
    out = TrialOut.of(trial).model_dump()
    assert out["test_metrics"] == {"auc": 0.75, "rejection_at_50": None, "loss": None}
    summary = trial_summary(trial, [])
    assert summary["test_metrics"] == out["test_metrics"]
    line = test_line(summary)
    assert line is not None and "never seen by the search" in line
    assert "auc = 0.75" in line and "rejection_at_50 = -" in line
    assert test_line(trial_summary(Trial(2, 1, 1, {}), [])) is None


def test_the_dashboard_ranks_the_best_completed_trials() -> None:
    from gridml.server.routes.figures import best_completed

    study = Study(1, "demo", {"search": {"objective": "val_auc", "direction": "maximize"}}, "h")
    trials = [Trial(i + 1, 1, i, {}, state=s, objective=o) for i, (s, o) in enumerate(
        [("completed", 0.7), ("completed", 0.9), ("failed", None), ("completed", 0.9),
         ("diverged", None), ("completed", 0.8), ("pruned", 0.95)])]
    trials[5].violations = [0.1]  # infeasible: never among the best
    assert [t.number for t in best_completed(study, trials, 5)] == [1, 3, 0]
    assert [t.number for t in best_completed(study, trials, 2)] == [1, 3]
