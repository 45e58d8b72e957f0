"""Never twice (issue 20): a trial whose model file fails with exit code 2 is not retried, and the
campaign stops once backend.max_same_failures trials failed with the same error, `gridml submit`
exiting non-zero with that error on one line; submitted again with max_trials raised, the study
stays stopped and `gridml status` shows the raised max_trials. Real CLI, local executor, torchrun."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from gridml.data import open_data_manager
from gridml.store import open_store
from tests.helpers import ROOT, gridml, write_spec

pytest.importorskip("torch")

SEARCH = textwrap.dedent("""\
    search:
      algorithm: random
      objective: val_loss
      max_trials: {max_trials}
      parallel: 1
      seed: 1
      space:
        units: {{type: int, low: 8, high: 16}}
    """)


def test_exit_2_is_not_retried_and_the_same_error_stops_the_campaign(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    sys.path.insert(0, str(ROOT / "examples"))
    from make_sample_data import make_sample_data  # type: ignore[import-not-found]

    monkeypatch.setenv("GRIDML_HOME", str(tmp_path / "home"))
    train, val = make_sample_data(tmp_path / "data", n_train=128, n_val=64, n_files=1, seed=4)
    dm = open_data_manager("local")
    dm.upload(train, "user.sf:train")
    dm.upload(val, "user.sf:val")
    model = tmp_path / "model.py"
    model.write_text("import torch\nimport weaver_is_not_installed\n\n\n"
                     "def build_model(hparams, input_shape):\n    return torch.nn.Linear(10, 1)\n")
    sections = dict(
        payload=f"payload:\n  framework: torch\n  model: {model}\n",
        training="training: {epochs: 1, batch_size: 32, metrics: [accuracy], workers: 1}\n",
        resources="resources: {cores: 1, gpus: 0, memory_gb: 2, walltime: 10m}\n",
        backend="backend: {executor: local, data: local, server: embedded, retries: 2, "
                "max_same_failures: 2}\n")
    spec = write_spec(tmp_path / "spec.yaml", "samefail", "user.sf:train", "user.sf:val",
                      search=SEARCH.format(max_trials=5), **sections)
    proc = gridml("submit", str(spec), "--quiet", check=False, timeout=600)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    said = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]
    assert len(said) == 1 and said[0].startswith(
        "error: study samefail stopped: 2 trials failed with the same error "
        "(backend.max_same_failures: 2): payload exited with code 2: gridml payload error: "
        f"model file {model} failed to import: ModuleNotFoundError: No module named "
        "'weaver_is_not_installed'"), proc.stderr
    store = open_store()  # (this test's GRIDML_HOME)
    study = store.get_study("samefail")
    trials = store.list_trials(study.id)
    assert [(t.state, t.attempts) for t in trials] == [("failed", 1)] * 2, trials
    assert study.state == "failed" and study.spec["search"]["max_trials"] == 5

    # max_trials raised, submitted again: the same campaign, its stored spec updated; the same
    # failures still stand, so nothing new runs
    write_spec(spec, "samefail", "user.sf:train", "user.sf:val",
               search=SEARCH.format(max_trials=8), **sections)
    again = gridml("submit", str(spec), "--quiet", check=False, timeout=300)
    assert again.returncode == 1 and "stopped: 2 trials failed" in again.stderr, again.stderr
    assert len(store.list_trials(study.id)) == 2
    shown = gridml("status", "samefail").stdout
    assert "samefail (failed): 2/8 trials" in " ".join(shown.split()), shown
    store.close()
