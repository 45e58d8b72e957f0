"""The pilot and runGen, played on this machine for one job of a task.

What a PanDA pilot does with a prun job, in small: expand the task's job parameters into runGen's
command line (input and output templates, ``$JEDITASKID``, ``${SN/P}``, ``${SURL}``), stage the
input files in from the data store into a fresh job directory, run the exec string there with the
``%IN``-style placeholders replaced by the staged file names, rename the outputs as runGen's ``-o``
map says and stage them out into the task's output containers, and always stage out a log tarball.
An output that was not written fails the job, unless it may be missing (prun's ``--allowNoOutput``):
its template is flagged ``allowNoOutput`` (JEDI hands its name to the pilot, which leaves it out of
stage-out; the server marks it ``nooutput``) and runGen's ``--allowNoOutput=`` lists it.
The container image is not pulled: the job runs on the host, in the environment the test gives it
(``env``: the virtualenv's bin first on PATH and the repository on PYTHONPATH stand in for it).
A worker node that cannot reach the controller: with ``env[NETNS]`` naming a network namespace
(:class:`tests.panda_double.PandaDouble` ``isolated=True`` makes one with a loopback only), the
exec runs inside it (``nsenter --net``), as payloads on a worker node do; the pilot's own work
(stage-in, sandbox, stage-out) stays on this machine's network, as a real pilot reaches its server
and storage. ``Job.exec_s`` is how long the exec ran.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shlex
import signal
import subprocess
import tarfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from gridml.executors.panda.render import panda_did

_PLACEHOLDER = re.compile(r"\$\{(\w+)(/T)?\}")
NETNS = "GRIDML_TEST_WORKER_NETNS"  # env key (the pilot's, not passed on): the exec's namespace


@dataclass
class Job:
    """One job of a task: its inputs per stream, the files it produced, how it ended."""

    panda_id: int
    task_id: int
    serial: int
    workdir: Path
    streams: dict[str, list[str]]  # stream name (IN, IN2) -> input file DIDs
    status: str = "defined"  # defined -> running -> finished | failed | cancelled
    exit_code: int | None = None
    diag: str = ""
    outputs: list[str] = field(default_factory=list)
    no_output: list[str] = field(default_factory=list)  # allowed not to be produced, and not produced
    proc: subprocess.Popen[bytes] | None = None
    result: dict[str, Any] | None = None  # an HPO job's output.json (status, loss, message)
    exec_s: float | None = None  # how long the exec (the payload) ran

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)


def expand(value: str, job: Job, params: dict[str, Any]) -> str:
    """A job parameter's value with JEDI's placeholders filled in."""
    def sub(m: re.Match[str]) -> str:
        name, as_list = m.group(1), m.group(2)
        if name == "SURL":
            return str(params.get("sourceURL", ""))
        if name in ("SN", "SN/P"):
            return f"{job.serial:06d}"
        names = [did.split(":", 1)[-1] for did in job.streams.get(name, [])]
        return str(names) if as_list else ",".join(names)
    value = value.replace("${SN/P}", f"{job.serial:06d}").replace("$JEDITASKID", str(job.task_id))
    return _PLACEHOLDER.sub(sub, value)


def command_line(params: dict[str, Any], job: Job) -> str:
    """runGen's arguments as JEDI writes them into the job (hidden items left out)."""
    out = ""
    for item in params["jobParameters"]:
        if item.get("hidden"):
            continue
        out += expand(str(item["value"]), job, params)
        out += "" if item.get("padding") is False else " "
    return out.strip()


def parse_rungen(line: str) -> dict[str, str]:
    """The options runGen reads (-o output map, -p exec, -i inputs, -r run dir, ...)."""
    args = shlex.split(line)
    opts: dict[str, str] = {}
    i = 0
    while i < len(args):
        if args[i].startswith("--") and "=" in args[i]:  # --allowNoOutput=a,b
            key, _, value = args[i].partition("=")
            opts[key] = value
            i += 1
        elif args[i].startswith("-") and i + 1 < len(args) and not args[i + 1].startswith("--"):
            opts[args[i]] = args[i + 1]
            i += 2
        else:
            opts[args[i]] = ""
            i += 1
    return opts


def exec_command(opts: dict[str, str], job: Job) -> str:
    """The user's exec string with %IN-style placeholders replaced (longest stream name first)."""
    command = unquote(opts.get("-p", ""))
    for stream in sorted(job.streams, key=len, reverse=True):
        names = ",".join(did.split(":", 1)[-1] for did in job.streams[stream])
        command = re.sub(rf"%{stream}\b", names, command)
    return command


def stage_in(data: Any, job: Job) -> None:
    for dids in job.streams.values():
        for did in dids:
            data.download(did, job.workdir)


def fetch_sandbox(opts: dict[str, str], job: Job) -> None:
    """runGen's ``-a``: the sandbox from ``<sourceURL>/cache/<name>`` into the job's directory
    (the wrapper unpacks it)."""
    name = opts.get("-a")
    if not name:
        return
    url = f"{opts.get('--sourceURL', '').rstrip('/')}/cache/{name}"
    with urllib.request.urlopen(url, timeout=60) as r:
        (job.workdir / os.path.basename(name)).write_bytes(r.read())


def run(params: dict[str, Any], job: Job, data: Any, env: dict[str, str], timeout_s: float,
        *, fail: bool = False) -> None:
    """Run the job to its end: stage-in, exec, stage-out, log. Sets job.status/exit_code/diag.

    ``fail``: the worker node is lost during stage-in (what a retry is for)."""
    job.workdir.mkdir(parents=True, exist_ok=True)
    job.status = "running"
    opts = parse_rungen(command_line(params, job))
    try:
        if fail:
            raise RuntimeError("lost heartbeat: the worker node went away (simulated)")
        stage_in(data, job)
        fetch_sandbox(opts, job)
    except Exception as exc:
        return _end(params, job, data, 1, f"stage-in failed: {exc}")
    rc = _execute(exec_command(opts, job), job, env, timeout_s)
    if job.status == "cancelled":
        return _end(params, job, data, rc, "killed by the task's kill command")
    missing = stage_out(params, opts, job, data) if rc == 0 else []
    diag = f"exec exited with {rc}" if rc else (f"missing outputs: {missing}" if missing else "")
    _end(params, job, data, rc or (1 if missing else 0), diag)


def run_hpo(params: dict[str, Any], job: Job, point: Any, data: Any, env: dict[str, str],
            timeout_s: float) -> None:
    """An evaluation job of a phpo task, as runHPO runs it: stage in, fetch and unpack the
    sandbox (``-a``), write the point (``--inSampleFile``) and the staged file names
    (``--writeInputToTxt STREAM:file``, a JSON list), run the evaluation command (``-p``), read
    its output (``-o``) into ``job.result``, stage the metrics file out (``--outMetricsFile=
    ${OUTPUT0}^file``) into the task's first output dataset whatever the exit code, and the log."""
    job.workdir.mkdir(parents=True, exist_ok=True)
    job.status = "running"
    opts = parse_rungen(command_line(params, job))
    try:
        stage_in(data, job)
        fetch_sandbox(opts, job)
        if opts.get("-a"):
            with tarfile.open(job.workdir / os.path.basename(opts["-a"])) as tar:
                tar.extractall(job.workdir, filter="data")
        (job.workdir / opts.get("--inSampleFile", "input.json")).write_text(json.dumps(point))
        for spec in filter(None, opts.get("--writeInputToTxt", "").split(",")):
            stream, name = spec.split(":", 1)
            names = [did.split(":", 1)[-1] for did in job.streams.get(stream, [])]
            (job.workdir / name).write_text(json.dumps(names))
    except Exception as exc:
        return _end(params, job, data, 1, f"stage-in failed: {exc}")
    rc = _execute(exec_command(opts, job), job, env, timeout_s)
    try:
        job.result = json.loads((job.workdir / opts.get("-o", "output.json")).read_text())
    except (OSError, ValueError):
        job.result = None
    metrics = opts.get("--outMetricsFile", "")
    outputs = [p for p in params["jobParameters"] if p.get("param_type") == "output"]
    local = metrics.split("^", 1)[-1] if metrics else ""
    if local and outputs and (job.workdir / local).is_file() and job.status != "cancelled":
        lfn = expand(outputs[0]["value"], job, params)
        _upload(data, job.workdir / local, lfn, outputs[0]["dataset"], job)
        job.outputs.append(lfn)
    ok = rc == 0 and (job.result or {}).get("status") == 0
    _end(params, job, data, 0 if ok else (rc or 1),
         "" if ok else f"evaluation failed (exit {rc}): {(job.result or {}).get('message')}")


def _execute(command: str, job: Job, env: dict[str, str], timeout_s: float) -> int:
    env = dict(env)
    netns = env.pop(NETNS, "")
    argv = ["/bin/sh", "-c", command]
    if netns:  # the worker node's network: no route to this machine
        argv = ["nsenter", f"--net=/var/run/netns/{netns}", *argv]
    t0 = time.monotonic()
    with open(job.workdir / "payload.stdout", "wb") as log:
        job.proc = subprocess.Popen(argv, cwd=job.workdir, env=env,
                                    stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            return job.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            job.kill()
            job.diag = f"walltime exceeded ({timeout_s:.0f} s)"
            return job.proc.wait()
        finally:
            job.exec_s = time.monotonic() - t0


def stage_out(params: dict[str, Any], opts: dict[str, str], job: Job, data: Any) -> list[str]:
    """Upload the renamed outputs into the task's output containers; the names not produced
    that were not allowed to be missing (both the template's ``allowNoOutput`` flag, which is what
    the pilot gets, and runGen's ``--allowNoOutput=`` list)."""
    out_map = ast.literal_eval(opts.get("-o", "{}") or "{}")
    by_lfn = {expand(p["value"], job, params): p for p in params["jobParameters"]
              if p.get("param_type") == "output"}
    rungen_allowed = set(opts.get("--allowNoOutput", "").split(","))  # expanded already
    missing = []
    for local, template in out_map.items():
        lfn = expand(template, job, params)
        src = job.workdir / local
        if not src.is_file():
            if by_lfn[lfn].get("allowNoOutput") and lfn in rungen_allowed:
                job.no_output.append(lfn)
            else:
                missing.append(local)
            continue
        _upload(data, src, lfn, by_lfn[lfn]["dataset"], job)
        job.outputs.append(lfn)
    return missing


def _upload(data: Any, src: Path, lfn: str, container: str, job: Job) -> None:
    """Into the per-task dataset ``<container>.<jediTaskID>``, attached to the container."""
    cont = panda_did(container)
    dataset = f"{cont}.{job.task_id}"
    data.upload([src], dataset, names=[lfn], metadata={"jediTaskID": job.task_id,
                                                      "PandaID": job.panda_id})
    data.add_container(cont, [dataset])


def _end(params: dict[str, Any], job: Job, data: Any, rc: int, diag: str) -> None:
    job.exit_code = rc
    job.diag = job.diag or diag
    if job.status != "cancelled":
        job.status = "finished" if rc == 0 else "failed"
    stage_out_log(params, job, data)


def stage_out_log(params: dict[str, Any], job: Job, data: Any) -> None:
    log = params.get("log")
    if not log:
        return
    lfn = expand(log["value"], job, params)
    tarball = job.workdir / lfn
    with tarfile.open(tarball, "w:gz") as tar:
        for name in ("payload.stdout", "payload.log"):
            if (job.workdir / name).is_file():
                tar.add(job.workdir / name, arcname=f"{job.panda_id}/{name}")
    _upload(data, tarball, lfn, log["dataset"], job)
