"""gridml's task parameters against prun's own, produced by panda-client in its dry mode.

prun (``pandaclient.PrunScript.main(get_taskparams=True, dry_mode=True)``) builds the task
parameter map for the equivalent command line without contacting any server; gridml's renderer
must agree with it field by field, apart from the documented differences (no sandbox, one job per
task, no automatic retries, the exec string carrying the trial).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from dataclasses import replace

from gridml.executors.panda.render import (
    TEST_OUTPUT_FILES,
    PandaTask,
    exec_string,
    job_command,
    render_task_params,
)
from gridml.planner import OPTIONAL_OUTPUT_FILES, output_files

pytestmark = [pytest.mark.slow]

SERVER = "https://pandaserver.example.org:25443/server/panda"
OUTPUTS = output_files("keras")  # what gridml stages out
GRIDML_ONLY = {"skipScout", "disableAutoRetry"}  # gridml's own choices (see panda_render)
PRUN_ONLY = {"osInfo"}  # the submitting host's OS, informational
DIFFERENT = {"cliParams"}  # the command line that made the task
SANDBOX = "jobO.gridml-0123456789abcdef.tar.gz"


def gridml_task() -> PandaTask:
    command = job_command({"study": "higgs", "output_dir": "/x"}, None, "mlp.py", workers=2,
                          controller="gloo", gpus=1, sandbox=SANDBOX)
    return PandaTask(nickname="dummy", study="higgs", trial_number=3,
                     train=["user.jdoe.higgs.train"], validation=["user.jdoe.higgs.val"],
                     n_train=2, n_validation=1, command=command, cores=8, memory_gb=16,
                     walltime_s=7200, gpus=1, vram_gb=16, container="docker://ghcr.io/gridml/payload:0.1",
                     site="ANALY_MANC_GPU", working_group="phys-higgs", rse="MANC_SCRATCHDISK",
                     client_version=_client_version(), source_url="https://pandaserver.example.org:25443",
                     sandbox=SANDBOX)


def _client_version() -> str:
    from pandaclient import PandaToolsPkgInfo

    return str(PandaToolsPkgInfo.release_version)


def prun_params(tmp: Path, task: PandaTask) -> dict[str, object]:
    """prun's map for the same trial (nickname is 'dummy' in prun's dry mode); a test split is
    prun's second secondary dataset, stream IN3."""
    secondary = f"IN2:{task.n_validation}:{task.validation[0]}"
    if task.test:
        secondary += f",IN3:{task.n_test}:{task.test[0]}"
    args = ["--outDS", "user.dummy.higgs.trial-0003", "--inDS", ",".join(task.train),
            "--secondaryDSs", secondary,
            "--exec", exec_string(render_task_params(task)), "--outputs", ",".join(task.outputs),
            "--containerImage", str(task.container), "--architecture", "#&nvidia:vram>=16384",
            "--nCore", "8", "--memory", "2048", "--maxWalltime", "2", "--noBuild",
            "--site", str(task.site), "--destSE", str(task.rse), "--workingGroup", "phys-higgs",
            "--nFiles", "2", "--nFilesPerJob", "2", "--forceStaged",
            "--allowNoOutput", ",".join(task.optional)]
    if task.test:  # 13 outputs: over prun's client-side default of 10 per job (docs/grid.md)
        args.append("--unlimitNumOutputs")
    code = ("import json, sys; from pandaclient import PrunScript; sys.argv = ['prun']; "
            "m = PrunScript.main(get_taskparams=True, dry_mode=True, ext_args=json.loads(sys.argv_json)); "
            "print('@@' + json.dumps(m))").replace("sys.argv_json", repr(json.dumps(args)))
    env = {"PATH": str(Path(sys.executable).parent), "HOME": str(tmp), "PANDA_BEHIND_REAL_LB": "1",
           "PANDA_URL_SSL": SERVER, "PANDA_URL": SERVER, "PANDACACHE_URL": SERVER}
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp, env=env, capture_output=True,
                          text=True, timeout=120, check=False)
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("@@")), None)
    assert line, f"prun failed: {proc.stdout[-2000:]}\n{proc.stderr[-2000:]}"
    return json.loads(line[2:])  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def both(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, object], dict[str, object]]:
    task = gridml_task()
    ours = render_task_params(task)
    (tmp := tmp_path_factory.mktemp("prun")).mkdir(exist_ok=True)
    return ours, prun_params(tmp, task)


def test_the_same_task_level_fields_as_prun(both: tuple[dict, dict]) -> None:
    ours, prun = both
    assert set(ours) - set(prun) == GRIDML_ONLY
    assert set(prun) - set(ours) == PRUN_ONLY
    for key in sorted(set(ours) & set(prun) - DIFFERENT - {"jobParameters"}):
        assert ours[key] == prun[key], key


def test_the_same_job_parameters_as_prun_with_the_sandbox(both: tuple[dict, dict]) -> None:
    ours, prun = both
    assert {"type": "constant", "value": "-a None"} in prun["jobParameters"]  # dry mode: no upload
    theirs = [dict(p, value=f"-a {SANDBOX}") if p.get("value") == "-a None" else p
              for p in prun["jobParameters"]]
    assert ours["jobParameters"] == theirs


def test_model_onnx_may_be_missing_as_with_prun_allow_no_output(both: tuple[dict, dict]) -> None:
    """model.onnx is declared as ``prun --allowNoOutput model.onnx`` declares it: the template is
    flagged and runGen gets the list; the files every trial writes are not flagged."""
    ours, prun = both
    for params in (ours, prun):
        flagged = [p["value"] for p in params["jobParameters"] if p.get("allowNoOutput")]
        # model.onnx, and a classifier's figures of merit (roc.json, roc.png, scores.png)
        assert flagged == [f"user.dummy.$JEDITASKID._${{SN/P}}.{n}" for n in OPTIONAL_OUTPUT_FILES]
        assert len(flagged) == 4, flagged
        assert {"type": "constant",
                "value": f"--allowNoOutput={','.join(flagged)}"} in params["jobParameters"]


def test_a_test_split_renders_as_prun_renders_a_third_stream(tmp_path: Path) -> None:
    """data.test: prun's ``--secondaryDSs IN2:1:val,IN3:1:test``, the test figures declared as
    ``--outputs``/``--allowNoOutput`` declare them; the same job parameters."""
    base = gridml_task()
    command = job_command({"study": "higgs", "output_dir": "/x", "data": {"test": ["e0.h5"]}},
                          None, "mlp.py", workers=2, controller="gloo", gpus=1, sandbox=SANDBOX)
    task = replace(base, command=command, test=("user.jdoe.higgs.test",), n_test=1,
                   outputs=(*OUTPUTS, *TEST_OUTPUT_FILES),
                   optional=(*OPTIONAL_OUTPUT_FILES, *TEST_OUTPUT_FILES))
    ours, prun = render_task_params(task), prun_params(tmp_path, task)
    theirs = [dict(p, value=f"-a {SANDBOX}") if p.get("value") == "-a None" else p
              for p in prun["jobParameters"]]  # type: ignore[attr-defined]
    assert ours["jobParameters"] == theirs
    assert any(p.get("value") == "${IN3}" for p in ours["jobParameters"])
