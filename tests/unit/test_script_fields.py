"""Nothing reaches a batch script or a task parameter unchecked (gridml.fields): hostile values
in every field bound for the sbatch script (Slurm names, options and their keys, the container,
the walltime, environment names) or the JEDI task parameters (site, nickname, working group, VO,
RSE, container) are refused with the field named, at render and at `gridml validate`; ordinary
values render as before (the golden files: tests/slurm/test_slurm_dryrun.py,
tests/unit/test_panda_render.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gridml import fields
from gridml.errors import SpecError
from gridml.executors.panda.render import PandaTask, job_command, render_task_params
from gridml.executors.slurm.render import render_script, slurm_time
from gridml.planner import TaskRequest
from gridml.spec import load_spec
from payloads.runtime import trial as contract
from tests.helpers import ROOT, write_spec

# a newline (a second #SBATCH or shell line), blanks (a second sbatch option), shell
# metacharacters, quotes, a leading '-' (an option), control characters
HOSTILE = ["gpu\n#SBATCH --uid=0", "gpu\nrm -rf ~", "gpu --uid=0", "gpu;id", "gpu$(id)",
           "`id`", "gpu'x", 'gpu"x', "gpu\\x", "-x", "gpu\r", "gpu\x00", "gpu\tx", "gpu#x",
           "gpu>x", "{gpu}"]


def slurm_request(tmp_path: Path, *, site: dict[str, Any] | None = None, **kw: Any) -> TaskRequest:
    doc = contract.TrialDoc(study="fields", trial_id=1, trial_number=0, hparams={},
                            model_file=tmp_path / "model.py", training=contract.Training(),
                            data=contract.Data(train=("t.h5",), validation=("v.h5",)),
                            output_dir=tmp_path / "outputs")
    base: dict[str, Any] = dict(study="fields", trial_id=1, trial_number=0, attempt=1,
                                workdir=tmp_path / "trial-0000", trial=doc,
                                model_file=tmp_path / "model.py", workers=1, cores=1, gpus=0,
                                memory_gb=1, walltime_s=600, site=site or {})
    base.update(kw)
    return TaskRequest(**base)


def script(req: TaskRequest) -> str:
    return render_script(req, req.workdir / "attempt-1" / "trial.json", "/env/bin")


def sbatch_lines(text: str) -> list[str]:
    return [line.removeprefix("#SBATCH ") for line in text.splitlines()
            if line.startswith("#SBATCH ")]


# ---- Slurm: refused at render, field named ---------------------------------------------------------
@pytest.mark.parametrize("key", ["partition", "account", "qos", "constraint"])
@pytest.mark.parametrize("value", HOSTILE)
def test_a_hostile_slurm_name_is_refused_with_its_field(tmp_path: Path, key: str, value: str) -> None:
    with pytest.raises(SpecError, match=f"slurm.{key}"):
        script(slurm_request(tmp_path, site={key: value}))


@pytest.mark.parametrize("value", HOSTILE)
def test_a_hostile_slurm_option_value_is_refused_with_its_field(tmp_path: Path, value: str) -> None:
    with pytest.raises(SpecError, match="slurm.options.gres"):
        script(slurm_request(tmp_path, site={"options": {"gres": value}}))


@pytest.mark.parametrize("key", ["a b", "x\n#SBATCH --uid", "x;id", "x=1", "", "1x", "x$(id)",
                                 "x'", "job-name", "output", "chdir", "comment", "wrap"])
def test_a_bad_or_reserved_option_key_is_refused(tmp_path: Path, key: str) -> None:
    with pytest.raises(SpecError, match="slurm.options"):
        script(slurm_request(tmp_path, site={"options": {key: 1}}))


@pytest.mark.parametrize("image", ["img;id", "-B /:/host", "img\nid", "a b", "img$(id)", "'x'"])
def test_a_hostile_container_is_refused(tmp_path: Path, image: str) -> None:
    with pytest.raises(SpecError, match="resources.container"):
        script(slurm_request(tmp_path, container=image))


@pytest.mark.parametrize("seconds", [0, -5, -3600])
def test_a_walltime_that_is_not_positive_is_refused_not_made_a_minute(tmp_path: Path,
                                                                      seconds: int) -> None:
    with pytest.raises(SpecError, match="resources.walltime"):
        slurm_time(seconds)
    with pytest.raises(SpecError, match="resources.walltime"):
        script(slurm_request(tmp_path, walltime_s=seconds))
    assert slurm_time(5) == "00:01:00"  # a positive one under a minute is Slurm's minimum


@pytest.mark.parametrize("name", ["A B", "X;id", "X\nY", "1X", "X-Y"])
def test_an_environment_name_that_is_no_name_is_refused(tmp_path: Path, name: str) -> None:
    with pytest.raises(SpecError, match="environment variable"):
        script(slurm_request(tmp_path, env={name: "1"}))


def test_a_hostile_study_name_never_reaches_the_job_name(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="job name"):
        script(slurm_request(tmp_path, study="x\n#SBATCH --uid=0"))


def test_a_working_folder_with_a_blank_is_refused_for_the_sbatch_lines(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="working folder"):
        script(slurm_request(tmp_path, workdir=tmp_path / "a b"))


# ---- Slurm: ordinary values, flags --------------------------------------------------------------
def test_ordinary_values_render_one_word_per_sbatch_line(tmp_path: Path) -> None:
    site = {"partition": "gpu,cpu", "account": "atlas-hep_1", "qos": "short",
            "constraint": "a100&ib|[rack1*2]", "setup": ["module load cuda/12.2"],
            "options": {"exclusive": True, "gpus-per-task": 1, "mail-type": "END,FAIL",
                        "gres": "gpu:a100:2", "signal": "B:USR1@60", "mem-per-gpu": 8.0}}
    text = script(slurm_request(tmp_path, site=site, container="docker://ghcr.io/x/y:1.0"))
    lines = sbatch_lines(text)
    for word in ("--partition=gpu,cpu", "--account=atlas-hep_1", "--qos=short",
                 "--constraint=a100&ib|[rack1*2]", "--exclusive", "--gpus-per-task=1",
                 "--mail-type=END,FAIL", "--gres=gpu:a100:2", "--signal=B:USR1@60",
                 "--mem-per-gpu=8", "--no-requeue"):
        assert word in lines, (word, lines)
    assert all(" " not in line for line in lines), lines
    assert "'docker://ghcr.io/x/y:1.0'" in text or "docker://ghcr.io/x/y:1.0" in text


@pytest.mark.parametrize("options,present,absent", [
    ({}, ["--no-requeue"], ["--requeue"]),
    ({"requeue": False}, ["--no-requeue"], ["--requeue"]),
    ({"requeue": True}, ["--requeue"], ["--no-requeue"]),
    ({"no-requeue": True}, ["--no-requeue"], ["--requeue"]),
    ({"--no-requeue": True}, ["--no-requeue"], ["--requeue"]),
    ({"no-requeue": None}, ["--no-requeue"], ["--requeue"]),
    ({"no-requeue": "yes"}, ["--no-requeue"], ["--requeue"]),
    ({"no-requeue": False}, ["--requeue"], ["--no-requeue"]),
    ({"hold": "true", "overcommit": 1}, ["--hold", "--overcommit", "--no-requeue"], []),
    ({"contiguous": False}, ["--no-requeue"], ["--contiguous"]),
])
def test_flag_only_options_are_rendered_bare_never_dropped(tmp_path: Path, options: dict[str, Any],
                                                          present: list[str],
                                                          absent: list[str]) -> None:
    lines = sbatch_lines(script(slurm_request(tmp_path, site={"options": options})))
    for word in present:
        assert lines.count(word) == 1, (word, lines)
    for word in absent:
        assert word not in lines, (word, lines)
    assert not any(line.startswith(("--requeue=", "--no-requeue=", "--hold=")) for line in lines)


def test_a_flag_only_option_with_a_value_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="slurm.options.no-requeue: --no-requeue takes no value"):
        script(slurm_request(tmp_path, site={"options": {"no-requeue": "maybe"}}))


# ---- PanDA task parameters -------------------------------------------------------------------------
def panda_task(**kw: Any) -> PandaTask:
    doc = {"version": 1, "study": "higgs", "trial_number": 3, "hparams": {},
           "data": {"train": ["t0.h5"], "validation": ["v0.h5"]}}
    command = job_command(doc, None, "mlp.py", workers=1, controller="gloo",
                          sandbox="jobO.gridml-0123456789abcdef.tar.gz")
    base: dict[str, Any] = dict(nickname="jdoe", study="higgs", trial_number=3,
                                train=["user.jdoe:higgs.train"], validation=["user.jdoe:higgs.val"],
                                n_train=1, n_validation=1, command=command,
                                sandbox="jobO.gridml-0123456789abcdef.tar.gz")
    base.update(kw)
    return PandaTask(**base)


@pytest.mark.parametrize("key", ["site", "nickname", "working_group", "vo", "rse"])
@pytest.mark.parametrize("value", HOSTILE)
def test_a_hostile_panda_value_is_refused_with_its_field(key: str, value: str) -> None:
    with pytest.raises(SpecError, match=f"panda.{key}"):
        render_task_params(panda_task(**{key: value}))


@pytest.mark.parametrize("value", HOSTILE + ["docker://x/y:1 --bind /"])
def test_a_hostile_panda_container_is_refused(value: str) -> None:
    with pytest.raises(SpecError, match="resources.container"):
        render_task_params(panda_task(container=value))


def test_a_panda_walltime_that_is_not_positive_is_refused() -> None:
    with pytest.raises(SpecError, match="resources.walltime"):
        render_task_params(panda_task(walltime_s=0))


def test_ordinary_panda_values_render() -> None:
    params = render_task_params(panda_task(site="ANALY_MANC_GPU", working_group="phys-higgs",
                                           rse="UKI-NORTHGRID-MAN-HEP_SCRATCHDISK",
                                           container="docker://ghcr.io/gridml/payload:0.1"))
    assert params["site"] == "ANALY_MANC_GPU"
    assert params["container_name"] == "docker://ghcr.io/gridml/payload:0.1"


# ---- `gridml validate`: the same checks, on the spec, field named ---------------------------------
SPEC_CASES = [
    ("slurm", {"partition": "gpu\n#SBATCH --uid=0"}, "slurm.partition"),
    ("slurm", {"account": "atlas; id"}, "slurm.account"),
    ("slurm", {"qos": "a b"}, "slurm.qos"),
    ("slurm", {"constraint": "a100$(id)"}, "slurm.constraint"),
    ("slurm", {"options": {"a b": 1}}, "slurm.options.a b"),
    ("slurm", {"options": {"gres": "gpu\nid"}}, "slurm.options.gres"),
    ("slurm", {"options": {"no-requeue": "maybe"}}, "slurm.options.no-requeue"),
    ("slurm", {"setup": ["module load x\nrm -rf ~"]}, "slurm.setup.0"),
    ("panda", {"site": "X;id"}, "panda.site"),
    ("panda", {"nickname": "j doe"}, "panda.nickname"),
    ("panda", {"rse": "X\nY"}, "panda.rse"),
    ("resources", {"container": "img;id"}, "resources.container"),
    ("resources", {"walltime": 0}, "resources.walltime"),
    ("resources", {"walltime": -5}, "resources.walltime"),
]


@pytest.mark.parametrize("section,value,field", SPEC_CASES)
def test_validate_refuses_a_hostile_value_with_its_field(tmp_path: Path, section: str,
                                                         value: dict[str, Any], field: str) -> None:
    train, val = "user.t:train", "user.t:val"
    text = f"{section}: {json.dumps(value)}\n"
    if section == "resources":
        text = f"resources: {json.dumps({'cores': 2, 'memory_gb': 2, **value})}\n"
    spec = write_spec(tmp_path / "spec.yaml", "fields", train, val, **{section: text})
    with pytest.raises(SpecError) as err:
        load_spec(spec)
    assert any(f": {field}:" in p for p in err.value.problems), err.value.problems


def test_validate_takes_ordinary_values(tmp_path: Path) -> None:
    spec = write_spec(tmp_path / "spec.yaml", "fields", "user.t:train", "user.t:val",
                      slurm='slurm: {partition: "gpu,cpu", constraint: "a100&ib", '
                            'options: {exclusive: true, no-requeue: true, gres: "gpu:2"}}\n',
                      panda="panda: {site: ANALY_X, nickname: jdoe, rse: X_SCRATCHDISK}\n")
    assert load_spec(spec).spec.slurm.partition == "gpu,cpu"
    assert fields.spec_problems(load_spec(spec).spec) == []
    assert (ROOT / "examples" / "models" / "mlp.py").is_file()
