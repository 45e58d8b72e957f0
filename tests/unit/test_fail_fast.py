"""Fail fast, never twice (issue 20): which payload failures are certain to repeat (never
retried), when failed trials share "the same error" (the campaign stops after
backend.max_same_failures), the build check's point and hook checks, and a resubmitted
campaign's stored spec (a raised max_trials is what `gridml status` shows)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gridml.errors import ConflictError
from gridml.executors.failures import deterministic, effective_code, repeated_failure, signature
from gridml.executors.probe import centre
from gridml.spec import checks, load_spec
from gridml.specmodel.model import Dimension
from payloads.runtime.model import not_a_keras_model

from tests.unit.test_spec import GOOD, refused, write_spec

OWN2 = "... Traceback lines ...\ngridml payload error: model file /tmp/a/m.py failed to import: " \
       "ModuleNotFoundError: No module named 'weaver'"
TORCHRUN = """gridml payload error: training.loss 'foo' is not known to the torch payload
[ERROR] failures:
  Root Cause (first observed failure):
  [0]:
    rank      : 1 (local_rank: 1)
    exitcode  : 2 (pid: 77)
"""
HOROVOD = "[1]<stderr>:gridml payload error: training.optimizer 'x' is not one of adam\n" \
          "Process 1 exit with status code 2."


@pytest.mark.parametrize("code, tail, expected", [
    (2, "gridml payload error: data.inputs: tracks takes columns ['q']", True),  # exit 2
    (2, "", True),  # a model file that exits 2 itself
    (1, "gridml payload error: ModuleNotFoundError: No module named 'energyflow'", True),
    (1, "  File \"m.py\", line 3\nSyntaxError: invalid syntax", True),
    (1, HOROVOD, True),  # horovodrun exits 1: the rank's code is in its summary
    (1, TORCHRUN, True),
    (None, OWN2, True),  # PanDA: no exit code, the payload's own words on exit 2
    (None, "pilot_wrapper: payload exited with 2; last lines of payload.log:", True),
    (None, "gridml payload error: training.loss 'foo' is not known to the torch payload", True),
    (1, "gridml payload error: RuntimeError: CUDA error: an illegal memory access", False),
    (3, "gridml payload error: input file /d/f.h5: truncated", False),  # data: may be re-fetched
    (137, "rank 0 killed by SIGKILL (out of memory?)", False),
    (None, "gridml payload error: RuntimeError: NCCL timeout", False),
    (None, "", False),
])
def test_what_is_certain_to_fail_again(code: int | None, tail: str, expected: bool) -> None:
    assert deterministic(code, tail) is expected


def test_the_rank_code_stands_for_the_launchers() -> None:
    assert effective_code(1, HOROVOD) == 2 and effective_code(1, TORCHRUN) == 2
    assert effective_code(3, "") == 3 and effective_code(None, "nothing said") is None


def test_the_same_error_across_trials_paths_numbers_and_jobs_aside() -> None:
    a = ("payload exited with code 2: gridml payload error: model file /runs/s/trial-0001/m.py "
         "failed to import: ModuleNotFoundError: No module named 'weaver'\nlog tail ...")
    b = ("Slurm job 4711 FAILED on node7: the payload exited with code 2: gridml payload error: "
         "model file /runs/s/trial-0002/m.py failed to import: ModuleNotFoundError: No module "
         "named 'weaver'")
    c = a.replace("weaver", "energyflow")
    assert signature(a) == signature(b) != signature(c)
    assert "<path>" in signature(a) and "4711" not in signature(b)
    assert signature("rank 1 killed by SIGKILL") == signature("rank 0 killed by SIGKILL")
    assert signature(None) == signature("") == ""


def test_a_campaign_stops_at_the_limit_naming_the_error_as_first_seen() -> None:
    a = "payload exited with code 2: gridml payload error: model file /r/t-1/m.py: bad"
    other = "payload exited with code 1: gridml payload error: RuntimeError: boom"
    errors = [a, other, a.replace("t-1", "t-2"), None]
    assert repeated_failure(errors, 3) is None
    assert repeated_failure(errors, 2) == (a, 2)
    assert repeated_failure([other], 1) == (other, 1)
    assert repeated_failure([], 1) is None


def test_the_build_check_point_is_the_centre_of_the_space() -> None:
    space = {"lr": Dimension(type="real", low=1e-4, high=1e-2, log=True),
             "units": Dimension(type="int", low=8, high=33),
             "act": Dimension(type="categorical", choices=["relu", "tanh"]),
             "momentum": Dimension(type="real", low=0, high=1, conditional={"opt": "sgd"}),
             "alpha": Dimension(type="real", low=0, high=1, conditional={"act": "relu"})}
    p = centre(space)
    assert p["lr"] == pytest.approx(1e-3) and p["units"] == 20 and p["act"] == "relu"
    assert "momentum" not in p and p["alpha"] == 0.5


def test_the_metrics_hook_arity_is_checked_in_both_frameworks(tmp_path: Path) -> None:
    bad = "def build_model(hparams, input_shape):\n    pass\n\n\ndef metrics(y_true, y_score):\n    return {}\n"
    for framework in ("keras", "torch"):
        model = tmp_path / f"m_{framework}.py"
        model.write_text(bad)
        problems = checks.check_model_file(model, framework)
        assert [p[1] for p in problems] == [
            f"{model}:5: the metrics hook must take (y_true, y_score, weights); fix its "
            "arguments or rename it"]
    good = bad.replace("(y_true, y_score)", "(y_true, y_score, weights=None)")
    model.write_text(good)
    assert checks.check_model_file(model, "torch") == []
    assert any("metrics hook" in line
               for line in refused(tmp_path, GOOD, model=bad))


def test_a_tf_keras_model_is_named_with_the_fix() -> None:
    functional = type("Functional", (), {"__module__": "tf_keras.src.engine.functional"})
    msg = not_a_keras_model(Path("/m/model.py"), functional())
    assert "tf_keras Functional (the standalone tf_keras package)" in msg
    assert "build it with tensorflow.keras" in msg and "\n" not in msg
    keras3 = type("Functional", (), {"__module__": "keras.src.models.functional"})
    assert "Keras 3" in not_a_keras_model(Path("m.py"), keras3())
    assert "returned dict, not a keras.Model" in not_a_keras_model(Path("m.py"), {})


def test_a_raised_max_trials_is_the_stored_spec(tmp_path: Path) -> None:
    from gridml.controller import ensure_study
    from gridml.store.sql.store import open_sql_store

    store = open_sql_store(f"sqlite:///{tmp_path / 'g.db'}")
    try:
        first = load_spec(write_spec(tmp_path, GOOD))
        study = ensure_study(store, first)
        assert store.get_study(study.id).spec["search"]["max_trials"] == 4
        raised = load_spec(write_spec(tmp_path, GOOD.replace("max_trials: 4", "max_trials: 9")
                                      .replace("parallel: 2", "parallel: 3")))
        assert raised.hash == first.hash  # the same campaign
        again = ensure_study(store, raised)
        assert again.id == study.id and again.spec["search"]["max_trials"] == 9
        stored = store.get_study(study.id).spec
        assert stored["search"]["max_trials"] == 9 and stored["search"]["parallel"] == 3
        with pytest.raises(ConflictError):
            store.update_study_spec(study.id, stored, "not-its-hash")
    finally:
        store.close()
