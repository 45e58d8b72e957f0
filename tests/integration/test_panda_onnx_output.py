"""model.onnx from grid trials: declared as an output a job may leave unwritten (prun's
``--allowNoOutput``), staged out when the export worked, and never the reason a job fails.

Each job here is a real PanDA task through the real panda-client and the PanDA double: the real
pilot wrapper runs on the "worker node", with a stand-in for the training payload (the model file
it unpacks, run as a script) that writes what the payload writes into ``outputs/``: with or
without model.onnx, provenance.json saying why not (``runtime.onnx``). The executor collects the
task's outputs as after any grid trial; the controller's record of them is what ``gridml fetch``
downloads. Whole trials with the real payloads run in tests/e2e/test_panda_*campaign.py.
"""

from __future__ import annotations

import json
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gridml.executors.panda import client as panda_client
from gridml.executors.panda import journal
from gridml.executors.panda.render import WRAPPER, PandaTask, pack, render_task_params
from gridml.planner import optional_output_files, output_files
from gridml.settings import settings
from tests.helpers import gridml
from tests.panda_double import PandaDouble
from tests.panda_double.jedi import FINAL
from tests.panda_double.campaign import make_campaign, panda_executor, panda_spec, register_sample_data

pytestmark = [pytest.mark.service]

ONNX = b"\x08\x07onnx-model-bytes"  # what the stand-in writes as model.onnx
REASON = "ScatterND: the exporter has no symbolic function for this op"
# The payload's outputs: model.onnx only with the argument "onnx", as an export that works.
STAND_IN = textwrap.dedent(f"""\
    import json, pathlib, sys
    out = pathlib.Path("outputs")
    model = "model.pt" if sys.argv[1] == "torch" else "model.keras"
    for name, text in ((model, "weights"), ("curves.png", "png"), ("model_source.py", "src"),
                       ("metrics.jsonl", '{{"epoch": 1, "metrics": {{"val_loss": 0.5}}}}\\n'),
                       ("result.json", '{{"state": "completed"}}')):
        (out / name).write_text(text)
    if sys.argv[3:] != ["regression"]:  # a classifier's figures of merit; a regression has none
        for name in ("roc.json", "roc.png", "scores.png"):
            (out / name).write_text("figure")
    written = sys.argv[2] == "onnx"
    if written:
        (out / "model.onnx").write_bytes({ONNX!r})
    onnx = {{"written": True, "verified": True}} if written else {{"written": False, "reason": {REASON!r}}}
    (out / "provenance.json").write_text(json.dumps({{"runtime": {{"onnx": onnx}}}}))
    """)


@pytest.fixture
def panda(tmp_path: Path, gridml_home: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[PandaDouble]:
    with PandaDouble(tmp_path / "panda") as double:
        for key, value in double.client_env().items():
            monkeypatch.setenv(key, value)
        yield double


@pytest.fixture
def spec(tmp_path: Path, gridml_home: Path) -> Path:
    train, val = register_sample_data(tmp_path, n_train=200, n_val=100)
    return panda_spec(tmp_path, "onnxgrid", train, val)


def run_trial(panda: PandaDouble, tmp_path: Path, framework: str, onnx: bool, *,
              outputs: tuple[str, ...] | None = None,
              regression: bool = False) -> tuple[Any, Any, Path]:
    """One grid job of a trial through the double; (the job, the executor's status, outputs/)."""
    output_dir = tmp_path / f"trial-{framework}-{onnx}" / "outputs"
    doc = {"study": "onnxgrid", "output_dir": str(output_dir), "inputs": [],
           "data": {"train": ["t.h5"], "validation": ["v.h5"]}}
    command = " ".join([WRAPPER, "--train", "%IN", "--validation", "%IN2",
                        "--trial", pack(json.dumps(doc).encode()), "--model", pack(STAND_IN.encode()),
                        "--model-name", "stand_in.py", "--", "python", "stand_in.py", framework,
                        "onnx" if onnx else "no-onnx", *(["regression"] if regression else [])])
    task = PandaTask(nickname="jtester", study="onnxgrid", trial_number=1,
                     train=["user.test:toy.train"], validation=["user.test:toy.val"], n_train=2,
                     n_validation=2, command=command,
                     outputs=outputs or output_files(framework),
                     optional=optional_output_files(framework))
    params = render_task_params(task)
    task_id, _ = panda_client.submit(params)
    journal.write_task(settings().runs_dir / ".journal" / "panda", task_id, params, output_dir)
    panda.jedi.wait(task_id, FINAL, timeout_s=120)
    return panda.jedi.get(task_id).jobs[-1], panda_executor().poll(f"panda:{task_id}"), output_dir


def stored_kind(o: dict[str, Any]) -> str:
    """``user.jtester.<task>._000001.model.onnx`` -> ``model.onnx``."""
    return o["name"].split("._", 1)[1].split(".", 1)[1]


@pytest.mark.parametrize("framework", ["keras", "torch"])
def test_a_written_model_onnx_comes_back_and_gridml_fetch_returns_it(
        panda: PandaDouble, spec: Path, tmp_path: Path, framework: str) -> None:
    job, status, _ = run_trial(panda, tmp_path, framework, onnx=True)
    assert job.status == "finished" and job.no_output == [], job.diag
    assert status.state == "completed", status
    kinds = sorted(stored_kind(o) for o in status.stored_outputs or [])
    assert kinds == sorted(output_files(framework)), kinds
    # what the controller does with a completed trial's outputs, then the user's `gridml fetch`
    campaign = make_campaign(spec)
    trial = campaign.store.create_trial(campaign.study.id, {"learning_rate": 0.01, "units": 8,
                                                            "dropout": 0.0, "activation": "relu"})
    campaign.store.update_trial(trial.id, state="completed", outputs=status.stored_outputs)
    dest = tmp_path / "fetched"
    proc = gridml("fetch", "onnxgrid", "--trial", str(trial.number), "-o", str(dest))
    onnx = [p for p in dest.iterdir() if p.name.endswith(".model.onnx")]
    assert len(onnx) == 1 and onnx[0].read_bytes() == ONNX, proc.stdout
    assert {n for n in ("roc.json", "roc.png", "scores.png")
            if any(p.name.endswith(f".{n}") for p in dest.iterdir())} == {
                "roc.json", "roc.png", "scores.png"}, proc.stdout  # the figures come back too
    assert any(p.name.endswith(f".{'model.pt' if framework == 'torch' else 'model.keras'}")
               for p in dest.iterdir())


def test_a_regression_trial_without_figures_of_merit_finishes(
        panda: PandaDouble, spec: Path, tmp_path: Path) -> None:
    """roc.json, roc.png, scores.png are optional outputs: a regression trial writes none."""
    job, status, _ = run_trial(panda, tmp_path, "torch", onnx=True, regression=True)
    assert job.status == "finished" and job.exit_code == 0, job.diag
    assert sorted(lfn.split("._", 1)[1].split(".", 1)[1] for lfn in job.no_output) == [
        "roc.json", "roc.png", "scores.png"]
    assert status.state == "completed", status
    kinds = sorted(stored_kind(o) for o in status.stored_outputs or [])
    assert kinds == sorted(set(output_files("torch")) - {"roc.json", "roc.png", "scores.png"})


def test_a_failed_export_leaves_the_job_finished_and_the_reason_in_provenance(
        panda: PandaDouble, spec: Path, tmp_path: Path) -> None:
    job, status, output_dir = run_trial(panda, tmp_path, "torch", onnx=False)
    assert job.status == "finished" and job.exit_code == 0, job.diag
    assert [lfn.rsplit(".", 2)[-2:] for lfn in job.no_output] == [["model", "onnx"]]
    assert status.state == "completed", status
    kinds = sorted(stored_kind(o) for o in status.stored_outputs or [])
    assert kinds == sorted(set(output_files("torch")) - {"model.onnx"}), kinds
    assert (output_dir / "result.json").is_file()  # what the controller reads came back
    prov = next(o for o in status.stored_outputs or [] if stored_kind(o) == "provenance.json")
    from gridml.data import open_data_manager

    [path] = open_data_manager("local").download(prov["did"], tmp_path / "prov")
    assert json.loads(Path(path).read_text())["runtime"]["onnx"] == {"written": False,
                                                                     "reason": REASON}


def test_a_missing_output_that_must_be_written_still_fails_the_job(
        panda: PandaDouble, spec: Path, tmp_path: Path) -> None:
    """Only the optional outputs may be missing: a declared model.h5 the payload never writes
    fails the job, as on the grid."""
    job, status, _ = run_trial(panda, tmp_path, "keras", onnx=True,
                               outputs=(*output_files("keras"), "model.h5"))
    assert job.status == "failed" and "missing outputs: ['model.h5']" in job.diag, job.diag
    assert status.state == "failed", status
