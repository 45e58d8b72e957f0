"""A campaign's identity (LoadedSpec.hash) survives upgrades: a study submitted with an earlier
gridml is still recognised by `gridml resume` and a rerun of the same spec."""

from __future__ import annotations

from pathlib import Path

import pytest

from gridml.spec import load_spec

SPEC = """\
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
  options: {prefetch_batches: 8}
search:
  algorithm: bayes
  objective: val_loss
  max_trials: 4
  parallel: 2
  space:
    learning_rate: {type: real, low: 0.0001, high: 0.1, log: true}
    units: {type: int, low: 8, high: 64}
resources: {cores: 2}
"""
# What gridml 0.1.0 (commit fc3c2fb, before the typed trial contract) computed for these specs.
FIRST_RELEASE = {"with_options": "1f06988981214cde", "plain": "46e64e495b143a8e"}


def _hash(tmp_path: Path, text: str) -> str:
    (tmp_path / "mlp.py").write_text("def build_model(hparams, input_shape):\n    return None\n")
    (tmp_path / "spec.yaml").write_text(text)
    return load_spec(tmp_path / "spec.yaml").hash


@pytest.mark.parametrize(("case", "text"), [
    ("with_options", SPEC), ("plain", SPEC.replace("  options: {prefetch_batches: 8}\n", "")),
])
def test_the_hash_is_the_first_releases(tmp_path: Path, case: str, text: str) -> None:
    assert _hash(tmp_path, text) == FIRST_RELEASE[case]


@pytest.mark.parametrize("change", [
    ("prefetch_batches: 8", "prefetch_batches: 6"),
    ("  workers: 2\n", "  workers: 2\n  mixed_precision: bf16\n"),
    ("search:\n", "search:\n  warm_start: [older]\n"),
    ("payload:\n", "payload:\n  framework: torch\n"),
])
def test_what_changes_results_changes_the_hash(tmp_path: Path, change: tuple[str, str]) -> None:
    assert _hash(tmp_path, SPEC.replace(*change)) != FIRST_RELEASE["with_options"]


def test_backend_and_parallelism_do_not(tmp_path: Path) -> None:
    text = SPEC.replace("  parallel: 2\n", "  parallel: 1\n") + "backend: {retries: 3}\nslurm: {partition: gpu}\n"
    assert _hash(tmp_path, text) == FIRST_RELEASE["with_options"]
