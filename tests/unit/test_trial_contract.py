"""The trial contract (payloads/runtime/trial.py): one typed definition, read and written the same
way by gridml and the payload; unknown or mistyped options refused on both sides."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from gridml.errors import SpecError
from gridml.spec import load_spec
from payloads.runtime import trial as contract
from payloads.runtime.errors import PayloadFailure

SPEC = """\
name: demo
payload:
  model: mlp.py
data:
  train: user.demo:t
  validation: user.demo:v
training:
  epochs: 2
  options:
    prefetch_batches: 8
search:
  objective: val_loss
  space:
    learning_rate: {type: real, low: 0.0001, high: 0.1, log: true}
"""


def spec_file(tmp_path: Path, text: str = SPEC) -> Path:
    (tmp_path / "mlp.py").write_text("def build_model(hparams, input_shape):\n    return None\n")
    path = tmp_path / "spec.yaml"
    path.write_text(text)
    return path


def doc(**changes: object) -> contract.TrialDoc:
    base = contract.TrialDoc(
        study="demo", trial_id=7, trial_number=3, hparams={"learning_rate": 0.01},
        model_file=Path("/m/mlp.py"), output_dir=Path("/o/outputs"),
        training=contract.Training(epochs=3, metrics=("accuracy", "auc"),
                                   options=contract.TrainingOptions(prefetch_batches=2)),
        data=contract.Data(features=("x",), train=("/d/a.h5", "/d/b.h5"), validation=("/d/v.h5",)),
        api=contract.Api(url="http://127.0.0.1:1", token="t"), seed=11)
    return base.replace(**changes)


def test_a_document_survives_json_both_ways(tmp_path: Path) -> None:
    original = doc()
    path = tmp_path / "trial.json"
    path.write_text(original.dumps())
    back = contract.load_trial(path)
    assert back.replace(path=None) == original
    assert back.training.options.prefetch_batches == 2 and back.training.options.checkpoint is True
    assert json.loads(path.read_text())["version"] == contract.CONTRACT_VERSION


def test_relative_paths_are_taken_relative_to_the_trial_file(tmp_path: Path) -> None:
    raw = doc().to_json() | {"model_file": "mlp.py", "output_dir": "out"}
    raw["data"]["train"] = ["a.h5"]
    (tmp_path / "trial.json").write_text(json.dumps(raw))
    back = contract.load_trial(tmp_path / "trial.json")
    assert back.model_file == tmp_path / "mlp.py" and back.output_dir == tmp_path / "out"
    assert back.data.train == (str(tmp_path / "a.h5"),)


def test_a_version_1_document_is_still_read(tmp_path: Path) -> None:
    """Version 1 kept the options beside epochs and batch_size (a PanDA job still queued)."""
    v1 = {"version": 1, "trial_id": 1, "model_file": "/m.py", "output_dir": "/o",
          "training": {"epochs": 2, "batch_size": 64, "prefetch_batches": 3, "checkpoint": False},
          "data": {"features": "x", "labels": "y", "train": ["/a.h5"], "validation": []}}
    back = contract.TrialDoc.from_json(v1)
    assert back.training.batch_size == 64 and back.data.features == ("x",)
    assert back.training.options.prefetch_batches == 3 and back.training.options.checkpoint is False


@pytest.mark.parametrize(("options", "message"), [
    ({"prefetch_batch": 8}, "training.options.prefetch_batch: unknown option; did you mean prefetch_batches?"),
    ({"prefetch_batches": "8"}, "training.options.prefetch_batches: '8' is not a whole number"),
    ({"cache_compression": "zip"}, "training.options.cache_compression: 'zip' is not one of"),
    ({"checkpoint": 1}, "training.options.checkpoint: 1 is not true or false"),
])
def test_the_payload_refuses_a_bad_option_naming_it(options: dict, message: str) -> None:
    raw = doc().to_json()
    raw["training"]["options"] = options
    with pytest.raises(PayloadFailure) as exc:
        contract.TrialDoc.from_json(raw, where="trial.json")
    assert message in str(exc.value) and exc.value.code == 2


def test_gridml_validate_refuses_a_typo_in_an_option_with_its_line(tmp_path: Path) -> None:
    path = spec_file(tmp_path, SPEC.replace("prefetch_batches: 8", "prefetch_batch: 8"))
    with pytest.raises(SpecError) as exc:
        load_spec(path)
    assert exc.value.problems == [f"{path}:10: training.options.prefetch_batch: unknown option; "
                                  "did you mean prefetch_batches?"]


def test_gridml_validate_refuses_a_mistyped_option(tmp_path: Path) -> None:
    path = spec_file(tmp_path, SPEC.replace("prefetch_batches: 8", "reader_processes: many"))
    with pytest.raises(SpecError) as exc:
        load_spec(path)
    assert len(exc.value.problems) >= 1
    assert all(p.startswith(f"{path}:10: training.options.reader_processes") for p in exc.value.problems)


def test_spec_options_are_the_contract_options(tmp_path: Path) -> None:
    loaded = load_spec(spec_file(tmp_path))
    assert isinstance(loaded.spec.training.options, contract.TrainingOptions)
    assert loaded.spec.training.options.prefetch_batches == 8


@pytest.mark.parametrize(("content", "expected"), [
    ("name: caf\xe9\n".encode("latin-1"), ":1: not UTF-8 text (byte 0xe9 at offset 9); save the spec as UTF-8"),
    (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", ":1: not a text file (it holds NUL bytes)"),
])
def test_a_spec_that_is_not_utf8_text_gets_one_line(tmp_path: Path, content: bytes, expected: str) -> None:
    path = tmp_path / "spec.yaml"
    path.write_bytes(content)
    out = subprocess.run([sys.executable, "-m", "gridml.cli", "validate", str(path)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2
    assert out.stderr.strip().startswith(f"error: {path}{expected}")
    assert "Traceback" not in out.stderr and len(out.stderr.strip().splitlines()) == 1


def test_the_payload_never_imports_gridml() -> None:
    code = textwrap.dedent("""
        import sys
        import payloads.runtime.trial, payloads.pilot_wrapper
        assert not [m for m in sys.modules if m == "gridml" or m.startswith("gridml.")], sys.modules
    """)
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
