"""From a trial's TaskRequest to its :class:`PandaTask` and task parameters (``--dry-run`` too).

The I/O around the pure renderer: the user's model file, and the grid nickname (the spec's
``panda.nickname``, or panda-client's answer from the token or proxy). Everything else comes from
the request: the trial document is inside it, the spec's ``panda`` section is ``req.site``.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gridml import __version__
from gridml.errors import ExecutorError
from gridml.executors.panda import client as pc
from gridml.executors.base import TaskRequest
from gridml.executors.reach import reachable_api_url
from gridml.planner import optional_output_files, output_files
from gridml.executors.panda.render import (
    TEST_OUTPUT_FILES,
    PandaTask,
    job_command,
    render_task_params,
)
from gridml.executors.panda.sandbox import Sandbox, sandbox_for
from gridml.layout import SANDBOX

log = logging.getLogger("gridml.executors.panda")
PLACEHOLDER_NICK = "NICKNAME"


def resolve_nickname(site: dict[str, Any], *, dry_run: bool = False) -> str:
    """The grid nickname: ``panda.nickname``, else panda-client's own answer from the token/proxy."""
    if site.get("nickname"):
        return str(site["nickname"])
    try:
        return _nickname_from_credentials()
    except ExecutorError:
        if dry_run:
            log.warning("no panda.nickname and no credentials: the dry run shows %s", PLACEHOLDER_NICK)
            return PLACEHOLDER_NICK
        raise


def _nickname_from_credentials() -> str:
    proxy = os.environ.get("X509_USER_PROXY") or f"/tmp/x509up_u{os.getuid()}"
    try:
        pc.check_credentials()
        if os.environ.get("PANDA_AUTH") is None and not os.path.exists(proxy):
            raise ExecutorError(f"no X509 proxy at {proxy} and PANDA_AUTH is not oidc")
    except ExecutorError as exc:
        raise ExecutorError(f"no grid nickname: panda.nickname is not set and there is no "
                            f"credential to read it from ({exc.message})",
                            hint="set panda.nickname in the spec, or PANDA_AUTH=oidc with a "
                                 "token, or an X509 proxy") from None
    pc.client()
    from pandaclient import PsubUtils

    nick = PsubUtils.getNickname()
    if not nick:
        raise ExecutorError("panda-client found no nickname in your credentials",
                            hint="set panda.nickname in the spec")
    return str(nick)


def task_from_request(req: TaskRequest, nickname: str, *, source_url: str | None = None,
                      client_version: str = "2.2.0",
                      upload: Callable[[Path], str] | None = None) -> PandaTask:
    """The :class:`PandaTask` for one trial attempt, from its request and the user's code.

    The code goes as a sandbox (:func:`trial_sandbox`); ``upload`` puts it into PanDA's cache and
    returns its name there (none: the dry run, which shows the name it will have)."""
    doc = grid_trial_document(req.trial.to_json())
    sandbox = trial_sandbox(req)
    name = upload(sandbox.write(req.workdir / SANDBOX)) if upload else sandbox.name
    command = job_command(doc, None, req.model_file.name, workers=req.workers,
                          controller=req.launcher, gpus=req.gpus, env=req.env, sandbox=name)
    site = req.site
    outputs = output_files(req.trial.training.framework)
    optional = optional_output_files(req.trial.training.framework)
    if req.test_dids:  # data.test: a third input stream (IN3) and the test split's figures
        outputs, optional = (*outputs, *TEST_OUTPUT_FILES), (*optional, *TEST_OUTPUT_FILES)
    return PandaTask(
        nickname=nickname, study=req.study, trial_number=req.trial_number,
        train=list(req.train_dids), validation=list(req.validation_dids),
        n_train=len(doc["data"]["train"]), n_validation=len(doc["data"]["validation"]),
        command=command, cores=req.cores, memory_gb=req.memory_gb, walltime_s=req.walltime_s,
        gpus=req.gpus, vram_gb=req.vram_gb, container=req.container,
        site=site.get("site"), working_group=site.get("working_group"),
        vo=site.get("vo") or "atlas", rse=site.get("rse"), client_version=client_version,
        source_url=source_url, outputs=outputs, optional=optional,
        cli_params=f"gridml {__version__} submit: study {req.study}, trial {req.trial_number}",
        sandbox=name, test=tuple(req.test_dids), n_test=len(doc["data"].get("test") or ()))


def payload_files(req: TaskRequest) -> list[str] | None:
    """The spec's ``payload.files`` (None: the model's folder travels)."""
    files = req.spec.payload.files if req.spec is not None else None
    return list(files) if files else None


def trial_sandbox(req: TaskRequest, extra: dict[str, bytes] | None = None) -> Sandbox:
    """The user's code as a sandbox (``payload.files`` or the model's folder)."""
    return sandbox_for(req.model_file, payload_files(req), req.model_file.parent, extra)


def grid_trial_document(doc: dict[str, Any]) -> dict[str, Any]:
    """The trial file as the job gets it: input files by name (the pilot stages them into the
    job's directory; a controller that staged them locally, the dry run, wrote paths), and no API
    a worker node cannot reach (:func:`gridml.executors.reach.reachable_api_url`: the embedded
    server's loopback URL): its metrics then come back in the spool with the outputs."""
    data = dict(doc["data"])
    for which in ("train", "validation"):
        data[which] = [Path(p).name for p in data.get(which, [])]
    if "test" in data:  # only when the spec names data.test (the job gets it as stream IN3)
        data["test"] = [Path(p).name for p in data["test"]]
    api = doc.get("api")
    if api and reachable_api_url(api.get("url"), remote=True) is None:
        log.debug("trial document without the API %s: a worker node cannot reach it", api.get("url"))
        api = None
    return dict(doc, data=data, api=api)


def render_for_request(req: TaskRequest) -> dict[str, Any]:
    """The JEDI task parameter map ``submit`` would send for ``req`` (used by ``--dry-run``)."""
    nick = resolve_nickname(req.site, dry_run=True)
    task = task_from_request(req, nick, source_url=pc.source_url(),
                             client_version=_client_version())
    return render_task_params(task)


def _client_version() -> str:
    try:
        return pc.client_version()
    except ImportError:  # pragma: no cover
        return "2.2.0"
