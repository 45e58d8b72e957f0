"""training.mixed_precision: false | true | bf16 | fp16 (and Keras' policy names), validated in
the spec and the trial contract, mapped by both payloads."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from gridml.errors import SpecError
from gridml.spec import load_spec
from payloads.runtime import gpu
from payloads.runtime.errors import PayloadFailure
from payloads.runtime.trial import TrialDoc

SPEC = """\
name: demo
payload: {model: mlp.py}
data: {train: user.demo:t, validation: user.demo:v}
training: {epochs: 1, mixed_precision: VALUE}
search:
  space: {learning_rate: {type: real, low: 1.0e-4, high: 1.0e-1, log: true}}
"""


def _spec(tmp_path: Path, value: str) -> Path:
    (tmp_path / "mlp.py").write_text("def build_model(hparams, input_shape):\n    return None\n")
    path = tmp_path / "spec.yaml"
    path.write_text(SPEC.replace("VALUE", value))
    return path


@pytest.mark.parametrize("value, typed", [
    ("false", False), ("true", True), ("bf16", "bf16"), ("fp16", "fp16"), ("BF16", "bf16"),
    ("mixed_float16", "mixed_float16"), ("mixed_bfloat16", "mixed_bfloat16")])
def test_the_spec_accepts_the_precisions(tmp_path: Path, value: str, typed: object) -> None:
    assert load_spec(_spec(tmp_path, value)).spec.training.mixed_precision == typed


@pytest.mark.parametrize("value", ["fp32", "float16x", "1", "[bf16]"])
def test_the_spec_refuses_other_values_in_one_line(tmp_path: Path, value: str) -> None:
    with pytest.raises(SpecError) as info:
        load_spec(_spec(tmp_path, value))
    problems = info.value.problems
    assert len(problems) == 1 and "\n" not in problems[0], problems
    assert "spec.yaml:4: training.mixed_precision:" in problems[0]
    assert "bf16 or fp16" in problems[0]


def _trial(precision: object) -> dict:
    return {"trial_id": 1, "model_file": "m.py", "output_dir": "out",
            "data": {"train": ["a.h5"]}, "training": {"mixed_precision": precision}}


def test_the_trial_contract_carries_and_checks_it() -> None:
    for value in (False, True, "bf16", "fp16", "mixed_bfloat16"):
        assert TrialDoc.from_json(_trial(value)).training.mixed_precision == value
    with pytest.raises(PayloadFailure) as info:
        TrialDoc.from_json(_trial("fp8"))
    assert info.value.code == 2 and "training.mixed_precision" in str(info.value)
    doc = TrialDoc.from_json(_trial("bf16"))
    assert json.loads(doc.dumps())["training"]["mixed_precision"] == "bf16"


@pytest.mark.parametrize("option, gpu_policy, cpu_policy", [
    (False, "float32", "float32"), (True, "mixed_float16", "float32"),
    ("fp16", "mixed_float16", "float32"), ("mixed_float16", "mixed_float16", "float32"),
    ("bf16", "mixed_bfloat16", "mixed_bfloat16"),
    ("mixed_bfloat16", "mixed_bfloat16", "mixed_bfloat16")])
def test_keras_policies(option: object, gpu_policy: str, cpu_policy: str) -> None:
    assert gpu.precision_policy(option, "GPU:0") == gpu_policy
    assert gpu.precision_policy(option, "CPU") == cpu_policy


def test_fp16_on_a_cpu_falls_back_to_float32_with_a_log_line(
        caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="gridml.payload"):
        assert gpu.effective_precision("fp16", on_gpu=False) == "float32"
    assert "float16 needs a GPU; training in float32 on the CPU" in caplog.text
    with pytest.raises(ValueError):
        gpu.precision_kind("fp8")


def test_torch_amp_dtypes_and_bf16_autocast_on_the_cpu() -> None:
    torch = pytest.importorskip("torch")
    from payloads.runtime.torch_fit import precision

    cpu, cuda = torch.device("cpu"), torch.device("cuda", 0)
    assert precision(False, cpu) == (None, False, "float32")
    assert precision(True, cpu) == (None, False, "float32")
    assert precision("fp16", cuda) == (torch.float16, True, "float16")
    assert precision("mixed_float16", cuda) == (torch.float16, True, "float16")
    assert precision("bf16", cpu) == (torch.bfloat16, False, "bfloat16")
    assert precision("mixed_bfloat16", cuda) == (torch.bfloat16, False, "bfloat16")
    layer = torch.nn.Linear(8, 2)
    with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
        out = layer(torch.ones(4, 8))
    assert out.dtype == torch.bfloat16
    out.float().sum().backward()
    assert layer.weight.grad is not None and layer.weight.grad.dtype == torch.float32
