"""The build check (issue 20, "fail fast"): the payload's probe (payloads/probe.py) builds the
campaign's model as a trial would, on one batch of the data's real shapes, and names a missing
import, a wrong return type, an unknown metric name or a shape mismatch in one line; `gridml
validate` reports it against the spec, exit 2, before anything is submitted.

The cases run the real probe in this process (one framework import each, on the trial document
gridml.planner writes); one case goes through the real `gridml validate` in the payload's
interpreter (a subprocess)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from gridml.executors.probe import trial_file
from gridml.spec import load_spec
from tests.helpers import ROOT, gridml

sys.path.insert(0, str(ROOT / "examples"))
from make_sample_data import make_sample_data  # type: ignore[import-not-found]

SPEC = """\
name: bc
payload: {{framework: {framework}, model: {model}}}
data: {{train: "user.bc:train", validation: "user.bc:val", features: x, labels: y}}
training: {{epochs: 1, batch_size: 64, metrics: {metrics}}}
search:
  objective: val_loss
  max_trials: 2
  space:
    units: {{type: int, low: 8, high: 16}}
    learning_rate: {{type: real, low: 1.0e-3, high: 1.0e-2, log: true}}
"""
TORCH_GOOD = """\
import torch

def build_model(hparams, input_shape):
    n = int(hparams["units"])
    return torch.nn.Sequential(torch.nn.Linear(input_shape[0], n), torch.nn.ReLU(),
                               torch.nn.Linear(n, 1))

def metrics(y_true, y_score, weights):
    return {"my_fom": float((y_score.reshape(-1) > 0.5).mean())}
"""
KERAS_SHAPE = """\
from tensorflow import keras

def build_model(hparams, input_shape):
    inputs = keras.Input(shape=(4,))
    return keras.Model(inputs, keras.layers.Dense(1, activation="sigmoid")(inputs))
"""


@pytest.fixture(scope="module")
def train_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    train, _ = make_sample_data(tmp_path_factory.mktemp("bcdata"), n_train=256, n_val=64,
                                n_files=1, seed=2)
    return train[0]


def verdict(tmp: Path, train: Path, framework: str, model: str, metrics: str = "[accuracy]",
            name: str = "model.py") -> dict[str, Any]:
    """The probe's verdict on a spec of ``model`` (source, or an example's path)."""
    from payloads.probe import probe
    from payloads.runtime.trial import load_trial

    path = Path(model) if model.startswith("/") else tmp / name
    if not model.startswith("/"):
        path.write_text(model)
    spec = tmp / "spec.yaml"
    spec.write_text(SPEC.format(framework=framework, model=path, metrics=metrics))
    folder = tmp / f"probe-{name}"
    folder.mkdir(exist_ok=True)
    return probe(load_trial(trial_file(load_spec(spec), train, folder)))


def test_torch_models_are_built_on_one_real_batch(tmp_path: Path, train_file: Path) -> None:
    pytest.importorskip("torch")
    v = verdict(tmp_path, train_file, "torch", "import torch\nimport weaver_not_here\n"
                "def build_model(hparams, input_shape):\n    return None\n", name="a.py")
    assert v["field"] == "payload.model" and v["problem"].endswith(
        "a.py failed to import: ModuleNotFoundError: No module named 'weaver_not_here'"), v
    no_hook = TORCH_GOOD.split("def metrics")[0]
    v = verdict(tmp_path, train_file, "torch", no_hook, "[accuracy, nonsense_metric]", "b.py")
    assert v["field"] == "training.metrics" and "'nonsense_metric' is not known" in v["problem"]
    v = verdict(tmp_path, train_file, "torch", "import numpy\n"
                "def build_model(hparams, input_shape):\n    return numpy.zeros(3)\n", name="c.py")
    assert v["problem"].endswith("c.py: build_model returned ndarray, not a torch.nn.Module "
                                 "(payload.framework is torch)"), v
    v = verdict(tmp_path, train_file, "torch", TORCH_GOOD.replace("input_shape[0]", "4"),
                name="d.py")
    assert "the model's forward on one batch of x (B, 10) failed: RuntimeError: mat1 and " \
           "mat2 shapes cannot be multiplied" in v["problem"], v
    v = verdict(tmp_path, train_file, "torch", TORCH_GOOD.replace('"my_fom"', '"other"'),
                "[auc, my_fom, rejection_at_50]", "e.py")
    assert "metrics(...) returned no 'my_fom'" in v["problem"], v
    v = verdict(tmp_path, train_file, "torch", TORCH_GOOD, "[auc, my_fom, rejection_at_50]",
                "f.py")
    assert v == {"ok": "torch model built and run on one batch of 32 rows (x)"}


def test_keras_models_are_built_on_one_real_batch(tmp_path: Path, train_file: Path) -> None:
    pytest.importorskip("tensorflow")
    mlp = str(ROOT / "examples" / "models" / "mlp.py")
    v = verdict(tmp_path, train_file, "keras", "from tensorflow import keras\nimport tf_keras_nope\n"
                "def build_model(hparams, input_shape):\n    return None\n", name="a.py")
    assert "No module named 'tf_keras_nope'" in v["problem"] and v["field"] == "payload.model"
    v = verdict(tmp_path, train_file, "keras", mlp, "[accuracy, nonsense_metric]")
    assert v["field"] == "training.metrics" and "'nonsense_metric' is not known" in v["problem"]
    v = verdict(tmp_path, train_file, "keras", "def build_model(hparams, input_shape):\n"
                "    return {'layers': 2}\n", name="c.py")
    assert v["problem"].endswith("c.py: build_model returned dict, not a keras.Model "
                                 "(payload.framework is keras): return the model built with "
                                 "tensorflow.keras"), v
    v = verdict(tmp_path, train_file, "keras", KERAS_SHAPE, name="d.py")
    assert "d.py: the model on one batch of x (B, 10)" in v["problem"], v
    v = verdict(tmp_path, train_file, "keras", mlp, "[accuracy, auc, rejection_at_50]")
    assert v == {"ok": "keras model built and run on one batch of 32 rows (x)"}


def test_validate_names_a_missing_import_and_submits_nothing(
        tmp_path: Path, train_file: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("torch")
    monkeypatch.setenv("GRIDML_HOME", str(tmp_path / "home"))
    from gridml.data import open_data_manager

    dm = open_data_manager("local")
    dm.upload([train_file], "user.bc:train")
    dm.upload([train_file], "user.bc:val", names=["val.h5"])
    model = tmp_path / "model.py"
    model.write_text("import torch\nimport energyflow_absent\n\n\n"
                     "def build_model(hparams, input_shape):\n    return torch.nn.Linear(10, 1)\n")
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC.format(framework="torch", model="model.py", metrics="[accuracy]"))
    proc = gridml("validate", str(spec), check=False, timeout=300,
                  env={"GRIDML_BUILD_CHECK": "1"})
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert lines[0].startswith(
        f"error: {spec}:2: payload.model: model file {model} failed to import: "
        "ModuleNotFoundError: No module named 'energyflow_absent'; install it in the payload's "
        "environment"), lines
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
