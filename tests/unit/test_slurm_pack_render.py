"""The scripts of packed allocations and job arrays (gridml.executors.slurm.render_pack), the
spec checks of slurm.pack/array (gridml.fields), and the parsing of squeue's time left. Pure:
no Slurm here (tests/slurm/test_slurm_pack.py runs them on the test cluster)."""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path
from typing import Any

import pytest

from gridml import fields
from gridml.executors.slurm import render_pack as rp
from gridml.executors.slurm.cli import _duration_s, is_lost
from gridml.executors.slurm.render import render_script
from tests.unit.test_script_fields import slurm_request


def packed(tmp_path: Path, **kw: Any) -> Any:
    site = {"partition": "gpu", "pack": 4, **kw.pop("site", {})}
    return slurm_request(tmp_path, site=site, **kw)


def sbatch(text: str) -> list[str]:
    return [ln.removeprefix("#SBATCH ") for ln in text.splitlines() if ln.startswith("#SBATCH ")]


def test_an_allocation_holds_k_slots_of_one_trials_resources(tmp_path: Path) -> None:
    req = packed(tmp_path, cores=2, gpus=1, memory_gb=4, walltime_s=3600)
    folder = rp.alloc_folder(req)
    text = rp.alloc_script(req, folder)
    opts = sbatch(text)
    assert opts[:10] == [
        "--job-name=gridml.fields.alloc", f"--comment=gridml-{folder.name}", f"--chdir={folder}",
        f"--output={folder}/alloc-%j.log", "--open-mode=append", "--nodes=1", "--ntasks=4",
        "--cpus-per-task=2", "--mem=16384M", "--time=04:00:00"]  # default: 4 x the trial's walltime
    assert "--gpus=4" in opts and "--partition=gpu" in opts and "--no-requeue" in opts
    assert not any(o.startswith(("--gpus-per-node", "--ntasks-per-node")) for o in opts)
    assert folder.name == f"pack-{rp.alloc_shape(req)}" and folder.parent.name == ".slurm"
    subprocess.run(["bash", "-n"], input=text, text=True, check=True)  # valid bash


def test_pack_walltime_sets_the_allocations_time(tmp_path: Path) -> None:
    req = packed(tmp_path, site={"pack_walltime": "1d"})
    assert "--time=1-00:00:00" in sbatch(rp.alloc_script(req, rp.alloc_folder(req)))


def test_a_step_is_one_srun_exact_with_its_cores_gpus_and_walltime(tmp_path: Path) -> None:
    req = packed(tmp_path, cores=2, gpus=1, memory_gb=4, walltime_s=900, attempt=2)
    run = req.workdir / "attempt-2"
    assert rp.srun_argv(req, "123") == [
        "srun", "--jobid=123", "--exact", "--nodes=1", "--ntasks=1", "--cpus-per-task=2",
        "--mem=4096M", "--gpus-per-task=1", "--signal=USR1@120", "--time=00:15:00",
        "--job-name=gridml.fields.trial-0000.a2", f"--chdir={run}",
        f"--output={run}/payload.log", "--open-mode=append", "--kill-on-bad-exit=1",
        "bash", f"{run}/step.sh"]
    plain = rp.srun_argv(packed(tmp_path, site={"signal_grace": 0}), "1")
    assert not any(a.startswith(("--gpus", "--signal")) for a in plain)


def test_the_step_script_is_the_batch_script_without_its_sbatch_lines(tmp_path: Path) -> None:
    req = packed(tmp_path)
    batch = render_script(req, req.workdir / "attempt-1" / "trial.json", "/env/bin")
    step = rp.step_script(batch)
    assert "#SBATCH" not in step and "run as a job step of a packed allocation" in step
    assert [ln for ln in batch.splitlines()[2:] if not ln.startswith("#SBATCH")] == step.splitlines()[2:]


def test_trials_of_another_shape_get_other_allocations(tmp_path: Path) -> None:
    a, b = packed(tmp_path), packed(tmp_path, cores=2)
    assert rp.alloc_shape(a) == rp.alloc_shape(packed(tmp_path, trial_number=5))
    assert rp.alloc_shape(a) != rp.alloc_shape(b)


def test_an_array_runs_line_i_plus_one_of_its_task_list(tmp_path: Path) -> None:
    req = slurm_request(tmp_path, site={"array": True, "array_throttle": 2})
    folder = tmp_path / "array-x"
    text = rp.array_script(req.study, rp.array_own_options(req), folder, 5, rp.array_throttle(req))
    opts = sbatch(text)
    assert opts[:5] == ["--job-name=gridml.fields.array", "--comment=gridml-array-x",
                        f"--chdir={folder}", f"--output={folder}/task-%a.log", "--array=0-4%2"]
    assert "--ntasks=1" in opts and not any(o.startswith("--comment=gridml-attempt") for o in opts)
    assert "--signal=B:USR1@120" in opts  # the warning, to job.sh's trap (exec'd)
    quiet = slurm_request(tmp_path, site={"array": True, "signal_grace": 0})
    assert not any(o.startswith("--signal") for o in rp.array_own_options(quiet))
    subprocess.run(["bash", "-n"], input=text, text=True, check=True)
    # run it: task 1 enters the folder on line 2 and runs its job.sh there
    runs = [tmp_path / f"t{i}" for i in range(2)]
    for r in runs:
        r.mkdir()
        (r / "job.sh").write_text(f"echo ran in $PWD; echo {r.name} > marker\n")
    folder.mkdir()
    (folder / "tasks.txt").write_text("".join(f"{r}\n" for r in runs))
    subprocess.run(["bash", "-c", text], env={"SLURM_ARRAY_TASK_ID": "1", "SLURM_ARRAY_JOB_ID": "9",
                                              "PATH": "/usr/bin:/bin"}, check=True)
    assert (runs[1] / "marker").read_text() == "t1\n" and not (runs[0] / "marker").exists()
    assert "array job 9 task 1" in (runs[1] / "payload.log").read_text()
    assert rp.array_range(3, None) == "0-2"


def test_the_dry_run_shows_allocation_srun_and_step(tmp_path: Path) -> None:
    doc = rp.render_for_request(packed(tmp_path), bindir="/env/bin")
    assert doc["script_path"].endswith("attempt-1/step.sh") and doc["pack"] == 4
    text = doc["script"]
    assert text.index("#SBATCH --ntasks=4") < text.index("# srun '--jobid=<ALLOCATION>' --exact")
    assert shlex.join(doc["srun"]) in text
    arr = rp.render_for_request(slurm_request(tmp_path, site={"array": True}), bindir="/env/bin")
    assert "#SBATCH --array=0-0" in arr["script"] and "exec bash job.sh" in arr["script"]
    plain = rp.render_for_request(slurm_request(tmp_path), bindir="/env/bin")
    assert "srun" not in plain and "--array" not in plain["script"]


class _Spec:
    def __init__(self, slurm: dict[str, Any], nodes: int = 1, horovod: str = "gloo") -> None:
        from gridml.specmodel.model import Resources, Slurm, Training

        self.slurm = Slurm(**slurm)
        self.resources = Resources(nodes=nodes, walltime="1h")
        self.training = Training.model_construct(horovod=horovod)


@pytest.mark.parametrize("slurm,kw,wanted", [
    ({"pack": 2, "array": True}, {}, "slurm.pack and slurm.array exclude each other"),
    ({"array_throttle": 2}, {}, "array_throttle needs slurm.array: true"),
    ({"pack_walltime": "2h"}, {}, "pack_walltime needs slurm.pack"),
    ({"pack": 2}, {"nodes": 2}, "packs one-node trials"),
    ({"pack": 2}, {"horovod": "mpi"}, "horovod: mpi needs an allocation of its own"),
    ({"pack": 2, "pack_walltime": "1h"}, {}, "leaves no room for a trial"),
])
def test_pack_and_array_are_checked_against_the_spec(slurm: dict[str, Any], kw: dict[str, Any],
                                                      wanted: str) -> None:
    problems = fields.spec_problems(_Spec(slurm, **kw))
    assert len(problems) == 1 and wanted in problems[0][1], problems
    assert not fields.spec_problems(_Spec({"pack": 2, "pack_walltime": "4h"}))


def test_squeue_time_left_and_lost_node_states() -> None:
    assert _duration_s("4:58") == 298 and _duration_s("1:04:58") == 3898
    assert _duration_s("2-03:04:05") == 2 * 86400 + 3 * 3600 + 4 * 60 + 5
    assert _duration_s("UNLIMITED") is None and _duration_s("INVALID") is None
    assert is_lost("MIXED+NOT_RESPONDING") and is_lost("DOWN+NOT_RESPONDING") and is_lost("IDLE*")
    assert not is_lost("ALLOCATED") and not is_lost("MIXED") and not is_lost("DRAINING")
