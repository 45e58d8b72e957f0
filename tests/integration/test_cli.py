"""The real `gridml` command: user mistakes give one clear line and an exit code, never a traceback."""

from __future__ import annotations

import json
from pathlib import Path

from tests.helpers import gridml, write_spec


def test_bad_spec_is_refused_with_every_problem(tmp_path: Path) -> None:
    spec = write_spec(tmp_path / "spec.yaml", "bad", "user.x:train", "user.x:val")
    text = spec.read_text().replace("high: 32", "high: 4").replace("epochs: 2", "epochs: 0")
    spec.write_text(text + "extra_section: 1\n")
    proc = gridml("validate", str(spec), check=False)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert f"{spec}:" in proc.stderr
    for field in ("search.space.units.high", "training.epochs", "extra_section"):
        assert field in proc.stderr, proc.stderr


def test_unknown_dataset_in_spec_names_the_did_and_the_fix(tmp_path: Path) -> None:
    spec = write_spec(tmp_path / "spec.yaml", "nodata", "user.x:train", "user.x:val")
    proc = gridml("submit", str(spec), check=False)
    assert proc.returncode == 2
    assert "user.x:train not found" in proc.stderr and "gridml data put" in proc.stderr


def test_unknown_study_trial_and_usage(tmp_path: Path) -> None:
    proc = gridml("status", "nosuch", check=False)
    assert proc.returncode == 3 and "nosuch" in proc.stderr and "Traceback" not in proc.stderr
    proc = gridml("fetch", "nosuch", "-o", str(tmp_path), check=False)
    assert proc.returncode == 2 and "--best, --pareto or --trial" in proc.stderr
    proc = gridml("frobnicate", check=False)
    assert proc.returncode == 2 and "No such command" in proc.stderr
    proc = gridml("validate", str(tmp_path / "missing.yaml"), check=False)
    assert proc.returncode == 2 and "no such file" in proc.stderr


def test_schema_is_json_and_lists_the_sections() -> None:
    schema = json.loads(gridml("schema").stdout)
    assert {"name", "payload", "data", "training", "search"} <= set(schema["properties"])


def test_status_lists_studies_as_json() -> None:
    assert json.loads(gridml("status", "--json").stdout) == {"studies": []}


def test_init_writes_a_spec_and_a_starter_model_that_validate_once_the_data_exists(
        tmp_path: Path) -> None:
    spec = tmp_path / "tau.yaml"
    assert "models/tau.py" in gridml("init", "tau", "-o", str(spec)).stdout
    proc = gridml("validate", str(spec), check=False)
    # the model file is there (models/tau.py, relative to the spec); the datasets are the user's
    assert proc.returncode == 2 and "data.train" in proc.stderr and "payload.model" not in proc.stderr
    assert "tensorflow" in (tmp_path / "models" / "tau.py").read_text()
    assert gridml("init", "tau", "-o", str(spec), check=False).returncode == 2  # never overwrites
    # torch: the spec names the framework; a model file already there is kept, not replaced
    (tmp_path / "models" / "jets.py").write_text("# mine\n")
    out = gridml("init", "jets", "-o", str(tmp_path / "jets.yaml"), "--framework", "torch").stdout
    text = (tmp_path / "jets.yaml").read_text()
    assert "framework: torch" in text and "model: models/jets.py" in text and "kept" in out
    assert "output: {dataset: user.demo:jets.out}" in text  # each study its own output dataset
    assert (tmp_path / "models" / "jets.py").read_text() == "# mine\n"
    bad = gridml("init", "x", "-o", str(tmp_path / "x.yaml"), "--framework", "jax", check=False)
    assert bad.returncode == 2 and "keras or torch" in bad.stderr and "Traceback" not in bad.stderr
