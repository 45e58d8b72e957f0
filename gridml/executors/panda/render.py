"""Pure rendering of one trial into a JEDI task parameter map, the way panda-client's prun does.

No I/O and no panda-client import here: :func:`render_task_params` maps a :class:`PandaTask` to
the dict ``Client.insertTaskParams`` sends, so it is golden-file tested and the dry run shows
exactly what would be submitted. The layout follows prun (``PrunScript``) with ``--outDS``,
``--inDS``, ``--secondaryDSs``, ``--outputs``, ``--exec``, ``--containerImage`` (ALRB mode),
``--architecture``, ``--nCore``, ``--memory``, ``--maxWalltime``, ``--site``, ``--destSE``,
``--workingGroup`` and ``--noBuild``; the job runs prun's transformation (runGen) with the
exec string ``python -m payloads.pilot_wrapper ...``. Where gridml differs from prun:

* the user's code is a sandbox in PanDA's cache as prun's (``-a <name>``, :mod:`.panda_sandbox`),
  unpacked by the pilot wrapper; the trial file travels inside the exec string (gzip+base64), the
  payload code comes from the container image;
* secondary input DIDs keep their ``scope:`` (prun's ``--secondaryDSs`` syntax cannot carry one);
  the validation split is stream ``IN2`` and, when the spec names ``data.test``, the test split
  stream ``IN3`` (prun's ``--secondaryDSs IN2:n:val,IN3:m:test``); without a test split the
  parameters are exactly those of a two-stream task;
* one job per task: ``nFilesPerJob`` = all training files, each secondary stream takes all its files;
* ``disableAutoRetry`` and ``skipScout``: gridml's controller decides about retries (``retryTask``),
  and a one-job task has nothing to scout;
* ``coreCount`` takes any number of cores (prun's ``--nCore`` offers only 1 or 8);
* ``useLocalIO`` (prun's ``--forceStaged``): inputs are always copied into the job's directory.

Outputs the payload writes only when it can (``model.onnx``, see :data:`gridml.planner.OPTIONAL_OUTPUT_FILES`)
are declared as prun's ``--allowNoOutput`` declares them: the output template carries
``allowNoOutput: True`` (JEDI flags the dataset, the pilot gets the file's name in the job's
``allowNoOutput`` list and leaves it out of stage-out when it was not written, the server marks it
``nooutput`` and the job stays finished) and runGen gets ``--allowNoOutput=<templates>``. A written
``model.onnx`` is staged out and comes back like every other output. With a test split the job
also declares the test figures (:data:`TEST_OUTPUT_FILES`, optional as the validation ones are).
"""

from __future__ import annotations

import base64
import gzip
import json
import math
import shlex
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from gridml import fields
from gridml.planner import OPTIONAL_OUTPUT_FILES, output_files, payload_command

LOG_EXCLUDE = r"\.log\.tgz(\.\d+)*$"  # prun never feeds log tarballs of the input datasets to jobs
WRAPPER = "python -m payloads.pilot_wrapper"
# data.test's figures (payloads.runtime.core.TEST_FILES): declared only when the spec names a test
# split, optional (a regression trial writes none; result.json carries the test metrics)
TEST_OUTPUT_FILES = ("roc_test.json", "roc_test.png", "scores_test.png")


@dataclass(frozen=True)
class PandaTask:
    """Everything the task parameters depend on (see :func:`task_from_request`)."""

    nickname: str
    study: str
    trial_number: int
    train: list[str]  # dataset DIDs -> stream IN (primary)
    validation: list[str]  # dataset DIDs -> stream IN2 (secondary)
    n_train: int  # number of files, so that one job takes them all
    n_validation: int
    command: str  # the exec string (unquoted), see job_command
    cores: int = 1
    memory_gb: float = 4.0
    walltime_s: int = 3600
    gpus: int = 0
    vram_gb: float | None = None
    container: str | None = None
    site: str | None = None
    working_group: str | None = None
    vo: str = "atlas"
    rse: str | None = None  # destSE for the outputs
    outputs: tuple[str, ...] = output_files("keras")  # declared: runGen's -o map, one container each
    optional: tuple[str, ...] = OPTIONAL_OUTPUT_FILES  # those of outputs a job may leave unwritten
    client_version: str = "2.2.0"
    source_url: str | None = None
    cli_params: str = "gridml submit"
    name_suffix: str = ""  # ".aK": a new task for attempt K when the earlier one cannot be retried
    sandbox: str | None = None  # the user's code in PanDA's cache (prun's -a), see panda_sandbox
    test: tuple[str, ...] = ()  # data.test's dataset DIDs -> stream IN3 (secondary); () : no stream
    n_test: int = 0


# ---- names --------------------------------------------------------------------------------------
def task_name(nickname: str, study: str, number: int, suffix: str = "") -> str:
    """``user.<nickname>.<study>.trial-NNNN/``: the task name and its output container (prun's
    ``--outDS``), unique per trial, so a resubmission is recognised by the server."""
    return f"user.{nickname}.{study}.trial-{number:04d}{suffix}/"


def output_container(name: str, filename: str) -> str:
    """prun's per-output container: ``<outDS>_<file>/``."""
    return f"{name.rstrip('/')}_{filename}/"


def output_lfn(nickname: str, filename: str) -> str:
    """prun's output file name template; JEDI fills in the task id and the job's serial number."""
    return f"user.{nickname}.$JEDITASKID._${{SN/P}}.{filename}"


def log_container(name: str) -> str:
    return f"{name.rstrip('/')}.log/"


def architecture(gpus: int, vram_gb: float | None) -> str:
    """prun's ``--architecture``: ``#&nvidia`` asks the brokerage for a GPU queue, with
    ``:vram>=MB`` for a minimum GPU memory. PanDA has no GPU count: see docs/grid.md."""
    if gpus <= 0:
        return ""
    arch = "#&nvidia"
    if vram_gb:
        arch += f":vram>={math.ceil(vram_gb * 1024)}"
    return arch


# ---- the job's command ----------------------------------------------------------------------------
def pack(data: bytes) -> str:
    """gzip + urlsafe base64: how the trial file and the model file travel in the exec string."""
    return base64.urlsafe_b64encode(gzip.compress(data, mtime=0)).decode()


def job_command(doc: dict[str, Any], model_source: bytes | None, model_name: str, *, workers: int,
                controller: str, gpus: int = 0, env: dict[str, str] | None = None,
                sandbox: str | None = None) -> str:
    """The exec string: the pilot wrapper, the payload's horovodrun line after ``--``.

    ``%IN`` / ``%IN2`` (/ ``%IN3``: the test split, when the trial document has one) are prun
    placeholders: runGen puts the staged file names there. With a ``sandbox`` the model comes in
    it (``-a``, unpacked by the wrapper), else inside the string."""
    payload = payload_command(workers, controller, "trial.json",
                              framework=doc.get("training", {}).get("framework", "keras"))
    args = [WRAPPER, "--train", "%IN", "--validation", "%IN2"]
    if (doc.get("data") or {}).get("test"):
        args += ["--test", "%IN3"]
    args += ["--trial", pack(json.dumps(doc, sort_keys=True).encode())]
    if sandbox:
        args += ["--sandbox", shlex.quote(sandbox)]
    else:
        args += ["--model", pack(model_source or b"")]
    args += ["--model-name", shlex.quote(model_name)]
    if gpus:
        args += ["--gpus", str(gpus)]
    for key, value in sorted((env or {}).items()):
        args += ["--env", shlex.quote(f"{key}={value}")]
    return " ".join(args + ["--"] + payload)


# ---- the task parameters ---------------------------------------------------------------------------
def render_task_params(t: PandaTask) -> dict[str, Any]:
    """The JEDI task parameter map for one trial (what ``Client.insertTaskParams`` sends).
    Every name in it is checked first (:mod:`gridml.fields`): a bad one is a SpecError."""
    check_task(t)
    name = task_name(t.nickname, t.study, t.trial_number, t.name_suffix)
    params: dict[str, Any] = {
        "taskName": name, "uniqueTaskName": True, "vo": t.vo,
        "architecture": architecture(t.gpus, t.vram_gb),
        "transUses": "", "transHome": None,
        "processingType": f"panda-client-{t.client_version}-jedi-run",
        "prodSourceLabel": "user", "site": t.site, "excludedSite": [], "includedSite": None,
        "nFiles": t.n_train, "nFilesPerJob": t.n_train, "nMaxFilesPerJob": max(200, t.n_train),
        "cliParams": t.cli_params, "skipScout": True, "disableAutoRetry": 1,
        "respectSplitRule": True,
        # the pilot copies the inputs into the job's directory (prun's --forceStaged): the wrapper
        # checks them there, by size and adler32, and sites that read inputs in place break it
        "useLocalIO": 1,
        "maxWalltime": max(1, math.ceil(t.walltime_s / 3600)),
        "ramCount": math.ceil(t.memory_gb * 1024 / max(t.cores, 1)), "ramCountUnit": "MBPerCore",
    }
    if t.working_group:
        params["workingGroup"] = t.working_group.split(".")[0].split(":")[0]
    if t.cores > 1:
        params["coreCount"] = t.cores
    if t.source_url:
        params["sourceURL"] = t.source_url
    if t.container:
        params["container_name"] = t.container
        params["multiStepExec"] = multi_step_exec(t.container)
    params["log"] = log_param(name)
    params["jobParameters"] = job_parameters(t, name)
    params["dsForIN"] = ",".join(t.train)
    params["reuseSecOnDemand"] = True
    return params


def check_task(t: PandaTask) -> None:
    """The values JEDI and the pilot read as names (site, nickname, container, ...), checked."""
    fields.panda_value("panda.nickname", t.nickname)
    fields.job_name(t.study)
    for key in ("site", "working_group", "vo", "rse"):
        value = getattr(t, key)
        if value:
            fields.panda_value(f"panda.{key}", value)
    if t.container:
        fields.container("resources.container", t.container)
    fields.walltime("resources.walltime", t.walltime_s)
    if t.sandbox:
        fields.panda_value("sandbox", t.sandbox)


def multi_step_exec(image: str) -> dict[str, Any]:
    """ALRB container execution as prun sets it up (pre/post-processing by runGen outside)."""
    return {
        "preprocess": {"command": "${TRF}", "args": "--preprocess ${TRF_ARGS}"},
        "postprocess": {"command": "${TRF}", "args": "--postprocess ${TRF_ARGS}"},
        "containerOptions": {
            "containerExec": 'echo "=== cat exec script ==="; cat __run_main_exec.sh; echo; '
                             'echo "=== exec script ==="; /bin/sh __run_main_exec.sh',
            "containerImage": image,
        },
    }


def log_param(name: str) -> dict[str, Any]:
    ds = log_container(name)
    return {"dataset": ds, "container": ds, "type": "template", "param_type": "log",
            "value": f"{ds[:-1]}.$JEDITASKID.${{SN}}.log.tgz"}


def job_parameters(t: PandaTask, name: str) -> list[dict[str, Any]]:
    """runGen's arguments: source, run dir, outputs (and their renaming map), inputs, exec."""
    items: list[dict[str, Any]] = [
        {"type": "constant", "value": '-j "" --sourceURL ${SURL}'},
        {"type": "constant", "value": "-r ."},
        {"type": "constant", "value": "__delimiter__", "hidden": True},
    ]
    if t.sandbox:  # prun's place for it: runGen fetches it from ${SURL}/cache/
        items.append({"type": "constant", "value": f"-a {t.sandbox}"})
    out_map = {}
    for filename in t.outputs:
        lfn = output_lfn(t.nickname, filename)
        container = output_container(name, filename)
        item = {"type": "template", "value": lfn, "param_type": "output", "dataset": container,
                "container": container, "hidden": True}
        if t.rse:
            item["destination"] = t.rse
        if filename in t.optional:
            item["allowNoOutput"] = True
        items.append(item)
        out_map[filename] = lfn
    items.append({"type": "constant", "value": f'-o "{out_map}"'})
    if allowed := [out_map[f] for f in t.outputs if f in t.optional]:
        items.append({"type": "constant", "value": f"--allowNoOutput={','.join(allowed)}"})
    items.append({"type": "template", "param_type": "input", "value": '-i "${IN/T}"',
                  "dataset": ",".join(t.train), "exclude": LOG_EXCLUDE, "expand": True})
    items += [{"type": "constant", "value": '-p "', "padding": False},
              {"type": "constant", "value": quote(t.command), "padding": False},
              {"type": "constant", "value": '"'}]
    items.append({"type": "template", "param_type": "input", "value": "${IN2}",
                  "dataset": ",".join(t.validation), "expand": True, "hidden": True,
                  "nFilesPerJob": t.n_validation})
    in_map = "{'IN': ${IN/T}, 'IN2': ${IN2/T}}"
    if t.test:  # data.test: a third stream, as prun's second --secondaryDSs entry renders it
        items.append({"type": "template", "param_type": "input", "value": "${IN3}",
                      "dataset": ",".join(t.test), "expand": True, "hidden": True,
                      "nFilesPerJob": t.n_test})
        in_map = "{'IN': ${IN/T}, 'IN2': ${IN2/T}, 'IN3': ${IN3/T}}"
    items.append({"type": "constant", "value": f'--inMap "{in_map}"'})
    return items


# ---- reading rendered parameters back (the executor after a restart, the test double) --------------
def panda_did(name: str) -> str:
    """A PanDA dataset/container name as a DID: ``user.jdoe.x_y/`` -> ``user.jdoe:user.jdoe.x_y``.

    Names that carry a scope (``scope:name``) keep it; otherwise the scope is the first two fields
    (``user.<nick>``, ``group.<name>``), or the first one, as Rucio's ATLAS convention has it."""
    name = name.strip().rstrip("/")
    if ":" in name:
        return name
    fields = name.split(".")
    scope = ".".join(fields[:2]) if fields[0] in ("user", "group") else fields[0]
    return f"{scope}:{name}"


def exec_string(params: dict[str, Any]) -> str:
    """The job's exec string (unquoted) from rendered task parameters."""
    from urllib.parse import unquote

    items = params.get("jobParameters", [])
    for i, item in enumerate(items[:-1]):
        if item.get("type") == "constant" and item.get("value") == '-p "':
            return unquote(str(items[i + 1].get("value", "")))
    raise ValueError("the task parameters have no exec string (-p)")


def unpack_option(command: str, option: str) -> bytes:
    """The gzip+base64 value of ``option`` (``--trial``, ``--model``) in an exec string."""
    args = shlex.split(command)
    value = args[args.index(option) + 1]
    return gzip.decompress(base64.urlsafe_b64decode(value.encode()))


def output_items(params: dict[str, Any]) -> list[dict[str, Any]]:
    """The output templates of the task's job parameters."""
    return [p for p in params.get("jobParameters", []) if p.get("param_type") == "output"]
