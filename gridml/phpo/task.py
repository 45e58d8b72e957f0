"""The study's one phpo task: its parameters, built by panda-client's own phpo.

The task parameters come from panda-client's own builder, ``pandaclient.PhpoScript.main(
get_taskparams=True, dry_mode=True)``, run in a child process (it parses ``sys.argv``, makes a
scratch folder in its working directory and registers exit handlers) with the options a phpo user
writes: ``--steeringContainer``/``--steeringExec "gridml steer --in %IN --out %OUT --num-points
%NUM_POINTS --max-points %MAX_POINTS --algorithm A --seed S"``, ``--evaluationContainer``/
``--evaluationExec "gridml evaluate ..."``, ``--maxPoints`` (search.max_trials),
``--nParallelEvaluation`` (search.parallel), ``--nPointsPerIteration``, ``--trainingDS`` (the
training and validation datasets), ``--searchSpaceFile`` (search.space, gridml's format),
``--evaluationMetrics``, ``--architecture`` for GPUs. gridml then sets what phpo has no option for:
``coreCount``, ``ramCount``, ``maxWalltime``, ``cliParams``, and the sandbox: the user's code
plus ``gridml_trial.json`` (the planned trial document ``gridml evaluate`` fills in), uploaded
with ``Client.putFile`` and named in the job parameters (``-a``) in place of phpo's own.
"""

from __future__ import annotations

import json
import math
import os
import shlex
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gridml import __version__
from gridml.errors import ExecutorError
from gridml.executors.base import TaskRequest
from gridml.executors.panda import client as pc
from gridml.executors.panda.render import architecture, task_name
from gridml.executors.panda.request import grid_trial_document, trial_sandbox
from gridml.layout import SANDBOX
from gridml.specmodel.model import Search

TEMPLATE = "gridml_trial.json"
METRICS = "metrics.tgz"
DEFAULT_IMAGE = "docker://ghcr.io/gridml/payload:0.1"


def steer_exec(algorithm: str, seed: int, options: dict[str, Any]) -> str:
    """The steering command iDDS runs each step (its placeholders left for it)."""
    cmd = ["gridml", "steer", "--in", "%IN", "--out", "%OUT", "--num-points", "%NUM_POINTS",
           "--max-points", "%MAX_POINTS", "--algorithm", algorithm, "--seed", str(seed)]
    if options:
        cmd += ["--options", shlex.quote(json.dumps(options, sort_keys=True))]
    return " ".join(cmd)


def evaluate_exec() -> str:
    return (f"gridml evaluate --trial {TEMPLATE} --evaluationInput input.json "
            f"--evaluationTrainingData input_ds.json --evaluationOutput output.json "
            f"--evaluationMetrics {METRICS}")


def _search(req: TaskRequest) -> Search:
    """The study's search section (typed, with the spec model's defaults)."""
    if req.spec is None:
        raise ExecutorError(f"study {req.study}: the phpo task needs the campaign's spec",
                            hint="plan the request with gridml.planner.plan")
    return req.spec.search


def phpo_args(req: TaskRequest, out_ds: str, space_file: Path) -> list[str]:
    """phpo's command line for the study (what a phpo user would type)."""
    search = _search(req)
    image = req.container or DEFAULT_IMAGE
    parallel = search.parallel
    args = ["--outDS", out_ds,
            "--steeringContainer", image,
            "--steeringExec", steer_exec(search.algorithm, search.seed, dict(search.options)),
            "--evaluationContainer", image, "--evaluationExec", evaluate_exec(),
            "--evaluationInput", "input.json", "--evaluationTrainingData", "input_ds.json",
            "--evaluationOutput", "output.json", "--evaluationMetrics", METRICS,
            "--maxPoints", str(search.max_trials),
            "--nParallelEvaluation", str(parallel), "--nPointsPerIteration", str(parallel),
            "--trainingDS", ",".join(req.input_dids), "--searchSpaceFile", str(space_file)]
    if req.gpus:
        args += ["--architecture", architecture(req.gpus, req.vram_gb)]
    site = req.site
    if site.get("site"):
        args += ["--site", str(site["site"])]
    if site.get("working_group"):
        args += ["--workingGroup", str(site["working_group"])]
    return args


def phpo_task_params(args: list[str], cwd: Path) -> dict[str, Any]:
    """PhpoScript's task parameter map for ``args`` (dry mode: nothing uploaded or sent)."""
    code = ("import json, sys; from pandaclient import PhpoScript; sys.argv = ['phpo']; "
            "m = PhpoScript.main(get_taskparams=True, dry_mode=True, ext_args=json.loads(sys.stdin.read())); "
            "print('@@' + json.dumps(m))")
    env = {k: v for k, v in os.environ.items() if not k.startswith("GRIDML_")}
    env.setdefault("PANDA_BEHIND_REAL_LB", "1")
    proc = subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env, input=json.dumps(args),
                          capture_output=True, text=True, timeout=120, check=False)
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("@@")), None)
    if line is None:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        raise ExecutorError(f"panda-client's phpo did not build the task parameters: {tail[0]}")
    return json.loads(line[2:])  # type: ignore[no-any-return]


def render_phpo(req: TaskRequest, nickname: str, *,
                upload: Callable[[Path], str] | None = None) -> dict[str, Any]:
    """The phpo task parameters for the study of ``req`` (the plan of a trial without a point);
    ``upload`` puts the sandbox into PanDA's cache and returns its name there (none: its name)."""
    template = grid_trial_document(req.trial.to_json())
    template.update(hparams={}, trial_id=0, trial_number=0, api=None)
    sandbox = trial_sandbox(req, {TEMPLATE: json.dumps(template, indent=2, sort_keys=True).encode()})
    name = upload(sandbox.write(req.workdir / SANDBOX)) if upload else sandbox.name
    space = _search(req).space_dict()
    out_ds = task_name(nickname, req.study, 0).replace(".trial-0000/", ".phpo/")
    with tempfile.TemporaryDirectory(prefix="gridml-phpo-") as tmp:
        space_file = Path(tmp) / "space.json"
        space_file.write_text(json.dumps(space, sort_keys=True))
        params = phpo_task_params(phpo_args(req, out_ds, space_file), Path(tmp))
    params["jobParameters"] = [
        dict(p, value=f"-a {name} " + p["value"].split(" ", 2)[2])
        if str(p.get("value", "")).startswith("-a ") else p for p in params["jobParameters"]]
    params.update(
        coreCount=req.cores, ramCount=math.ceil(req.memory_gb * 1024 / max(req.cores, 1)),
        ramCountUnit="MBPerCore", maxWalltime=max(1, math.ceil(req.walltime_s / 3600)),
        cliParams=f"gridml {__version__} submit: study {req.study} (phpo)",
        sourceURL=pc.source_url(), uniqueTaskName=True)
    if req.site.get("vo"):
        params["vo"] = req.site["vo"]
    return params
