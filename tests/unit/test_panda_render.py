"""Golden-file tests of the pure task-parameter rendering (CPU, GPU, container, multi-input)."""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

import pytest

from gridml.executors.panda.executor import trial_state
from gridml.executors.panda.outputs import trial_doc_of
from gridml.executors.panda.render import (
    TEST_OUTPUT_FILES,
    PandaTask,
    architecture,
    exec_string,
    job_command,
    output_items,
    panda_did,
    render_task_params,
    task_name,
    unpack_option,
)

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "panda"
DOC = {"version": 1, "study": "higgs", "trial_number": 3, "hparams": {"units": 16},
       "data": {"train": ["t0.h5", "t1.h5"], "validation": ["v0.h5"]},
       "output_dir": "/home/u/.gridml/runs/higgs/trial-0003/outputs",
       "api": {"url": "http://127.0.0.1:8765", "token": "tok"}}
DOC_TEST = {**DOC, "data": {**DOC["data"], "test": ["e0.h5"]}}  # data.test: stream IN3
MODEL = b"def build_model(hparams, input_shape):\n    return None\n"
SANDBOX = "jobO.gridml-0123456789abcdef.tar.gz"


def base_task(**kw: object) -> PandaTask:
    command = job_command(DOC, None, "mlp.py", workers=2, controller="gloo",
                          gpus=int(kw.get("gpus", 0)), sandbox=SANDBOX)  # type: ignore[arg-type]
    task = PandaTask(nickname="jdoe", study="higgs", trial_number=3,
                     train=["user.jdoe:higgs.train"], validation=["user.jdoe:higgs.val"],
                     n_train=2, n_validation=1, command=command, cores=2, memory_gb=4,
                     walltime_s=5400, client_version="2.2.0",
                     source_url="https://pandaserver.cern.ch:25443",
                     cli_params="gridml submit higgs.yaml (study higgs, trial 3)", sandbox=SANDBOX)
    return replace(task, **kw)  # type: ignore[arg-type]


CASES = {
    "cpu": {},
    "gpu": {"gpus": 2, "vram_gb": 16.0, "cores": 4, "memory_gb": 16},
    "container": {"container": "docker://ghcr.io/gridml/payload:0.1", "site": "ANALY_MANC_GPU",
                  "rse": "UKI-NORTHGRID-MAN-HEP_SCRATCHDISK", "working_group": "phys-higgs"},
    "multi_input": {"train": ["user.jdoe:higgs.train.a", "mc23:mc23.higgs.train.b"],
                    "validation": ["user.jdoe:higgs.val.a", "user.jdoe:higgs.val.b"],
                    "n_train": 40, "n_validation": 8},
    # data.test: a third stream (IN3), the wrapper's --test and the test figures declared optional
    "test_split": {"test": ("user.jdoe:higgs.test",), "n_test": 1,
                   "command": job_command(DOC_TEST, None, "mlp.py", workers=2, controller="gloo",
                                          sandbox=SANDBOX),
                   "outputs": (*PandaTask.outputs, *TEST_OUTPUT_FILES),
                   "optional": (*PandaTask.optional, *TEST_OUTPUT_FILES)},
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_task_parameters_match_the_golden_file(case: str) -> None:
    rendered = render_task_params(base_task(**CASES[case]))
    path = GOLDEN / f"{case}.json"
    if os.environ.get("GRIDML_UPDATE_GOLDEN"):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(rendered, indent=2, sort_keys=True) + "\n")
    assert rendered == json.loads(path.read_text()), f"update with GRIDML_UPDATE_GOLDEN=1 ({path})"


def test_names_follow_prun_conventions() -> None:
    p = render_task_params(base_task())
    assert p["taskName"] == "user.jdoe.higgs.trial-0003/" and p["uniqueTaskName"] is True
    assert p["log"]["dataset"] == "user.jdoe.higgs.trial-0003.log/"
    outs = {i["dataset"] for i in output_items(p)}
    assert "user.jdoe.higgs.trial-0003_model.keras/" in outs and len(outs) == 10
    assert "user.jdoe.higgs.trial-0003_model.onnx/" in outs  # optional: see the next test
    assert {f"user.jdoe.higgs.trial-0003_{n}/" for n in ("roc.json", "roc.png", "scores.png")} <= outs
    assert "user.jdoe.higgs.trial-0003_model_source.py/" in outs  # the code that built the model
    assert p["useLocalIO"] == 1  # the wrapper checks the inputs copied into the job's directory
    assert all(i["value"].startswith("user.jdoe.$JEDITASKID._${SN/P}.") for i in output_items(p))
    assert task_name("jdoe", "higgs", 3, ".a2") == "user.jdoe.higgs.trial-0003.a2/"


def test_only_onnx_and_figures_may_be_missing_and_rungen_is_told_so() -> None:
    from gridml.planner import optional_output_files, output_files

    for framework in ("keras", "torch"):
        assert "model.onnx" in output_files(framework)
        # the figures of merit: a regression trial (or one without validation) writes none
        assert optional_output_files(framework) == ("model.onnx", "roc.json", "roc.png",
                                                    "scores.png")
        assert output_files(framework)[-4:] == optional_output_files(framework)
    p = render_task_params(base_task(outputs=output_files("torch")))
    flagged = {i["value"] for i in output_items(p) if i.get("allowNoOutput")}
    prefix = "user.jdoe.$JEDITASKID._${SN/P}."
    assert flagged == {prefix + n for n in ("model.onnx", "roc.json", "roc.png", "scores.png")}
    assert {i["value"] for i in output_items(p)} - flagged == {
        prefix + n for n in ("model.pt", "curves.png", "metrics.jsonl", "provenance.json",
                             "result.json", "model_source.py")}
    rungen = [i["value"] for i in p["jobParameters"] if str(i["value"]).startswith("--allowNoOutput")]
    assert rungen == ["--allowNoOutput=" + ",".join(
        prefix + n for n in ("model.onnx", "roc.json", "roc.png", "scores.png"))]
    none = render_task_params(base_task(optional=()))  # nothing optional: every output required
    assert not any(i.get("allowNoOutput") for i in output_items(none))
    assert not any(str(i["value"]).startswith("--allowNoOutput") for i in none["jobParameters"])


def test_resources_map_to_jedi_fields() -> None:
    cpu = render_task_params(base_task())
    assert cpu["coreCount"] == 2 and cpu["ramCount"] == 2048 and cpu["ramCountUnit"] == "MBPerCore"
    assert cpu["maxWalltime"] == 2 and cpu["architecture"] == ""  # 1.5 h rounds up to 2 h
    one = render_task_params(base_task(cores=1))
    assert "coreCount" not in one  # prun leaves it out for one core
    gpu = render_task_params(base_task(**CASES["gpu"]))  # type: ignore[arg-type]
    assert gpu["architecture"] == "#&nvidia:vram>=16384"
    assert "--gpus 2" in exec_string(gpu)


def test_architecture_string() -> None:
    assert architecture(0, 40) == ""
    assert architecture(1, None) == "#&nvidia"
    assert architecture(4, 39.5) == "#&nvidia:vram>=40448"


def test_container_uses_prun_alrb_fields() -> None:
    p = render_task_params(base_task(**CASES["container"]))  # type: ignore[arg-type]
    assert p["container_name"] == "docker://ghcr.io/gridml/payload:0.1"
    assert p["multiStepExec"]["containerOptions"]["containerImage"] == p["container_name"]
    assert all(i.get("destination") == "UKI-NORTHGRID-MAN-HEP_SCRATCHDISK" for i in output_items(p))
    assert p["site"] == "ANALY_MANC_GPU" and p["workingGroup"] == "phys-higgs"


def test_multi_input_datasets_are_comma_joined_streams() -> None:
    p = render_task_params(base_task(**CASES["multi_input"]))  # type: ignore[arg-type]
    inputs = [i for i in p["jobParameters"] if i.get("param_type") == "input"]
    assert inputs[0]["dataset"] == "user.jdoe:higgs.train.a,mc23:mc23.higgs.train.b"
    assert inputs[0]["value"] == '-i "${IN/T}"' and p["dsForIN"] == inputs[0]["dataset"]
    assert inputs[1]["value"] == "${IN2}" and inputs[1]["nFilesPerJob"] == 8
    assert p["nFilesPerJob"] == 40  # one job takes every training file


def test_a_test_split_is_a_third_stream_as_prun_renders_a_second_secondary_dataset() -> None:
    plain = render_task_params(base_task())
    p = render_task_params(base_task(**CASES["test_split"]))  # type: ignore[arg-type]
    inputs = [i for i in p["jobParameters"] if i.get("param_type") == "input"]
    assert [i["value"] for i in inputs] == ['-i "${IN/T}"', "${IN2}", "${IN3}"]
    assert inputs[2]["dataset"] == "user.jdoe:higgs.test" and inputs[2]["nFilesPerJob"] == 1
    assert p["jobParameters"][-1]["value"] == \
        "--inMap \"{'IN': ${IN/T}, 'IN2': ${IN2/T}, 'IN3': ${IN3/T}}\""
    assert "--validation %IN2 --test %IN3 --trial " in exec_string(p)
    assert "%IN3" not in exec_string(plain) and "IN3" not in json.dumps(plain)
    assert trial_doc_of(p)["data"]["test"] == ["e0.h5"]
    flagged = {i["value"].rsplit(".", 2)[-2] + "." + i["value"].rsplit(".", 1)[-1]
               for i in output_items(p) if i.get("allowNoOutput")}
    assert set(TEST_OUTPUT_FILES) <= flagged  # a regression trial writes no test figures
    assert len(output_items(p)) == len(output_items(plain)) + 3
    from payloads.runtime.core import TEST_FILES

    assert TEST_OUTPUT_FILES == TEST_FILES  # what the payload writes


def test_exec_string_carries_trial_and_model_and_the_planner_command() -> None:
    p = render_task_params(base_task())
    command = exec_string(p)
    assert command.startswith("python -m payloads.pilot_wrapper --train %IN --validation %IN2 ")
    assert command.endswith("-- python -m payloads.hvdrun -np 2 -H localhost:2 --gloo python -m "
                            "payloads.train_keras trial.json")
    assert f"--sandbox {SANDBOX} --model-name mlp.py" in command and "--model " not in command
    assert {"type": "constant", "value": f"-a {SANDBOX}"} == p["jobParameters"][3]  # prun's place
    assert p["sourceURL"] == "https://pandaserver.cern.ch:25443"  # where runGen fetches it from
    lone = job_command(DOC, MODEL, "mlp.py", workers=1, controller="gloo")  # no sandbox
    assert unpack_option(lone, "--model") == MODEL
    assert lone.endswith(" -- python -m payloads.train_keras trial.json")  # one worker: no launcher
    with_env = job_command(DOC, MODEL, "mlp.py", workers=3, controller="mpi", env={"A": "x y"})
    assert "--env 'A=x y' -- python -m payloads.hvdrun -np 3 -H localhost:3 --mpi" in with_env
    assert trial_doc_of(p) == DOC


def test_panda_names_become_dids() -> None:
    assert panda_did("user.jdoe.higgs.trial-0003_model.keras/") == \
        "user.jdoe:user.jdoe.higgs.trial-0003_model.keras"
    assert panda_did("mc23:mc23.higgs.train") == "mc23:mc23.higgs.train"
    assert panda_did("mc23_13TeV.12345.x") == "mc23_13TeV:mc23_13TeV.12345.x"


@pytest.mark.parametrize("panda,trial", [
    ("registered", "submitted"), ("defined", "submitted"), ("ready", "submitted"),
    ("pending", "submitted"), ("running", "running"), ("scouting", "running"),
    ("done", "completed"), ("finished", "completed"), ("failed", "failed"),
    ("broken", "failed"), ("exhausted", "failed"), ("aborting", "killed"), ("aborted", "killed"),
])
def test_panda_task_states_map_to_trial_states(panda: str, trial: str) -> None:
    assert trial_state(panda) == trial
