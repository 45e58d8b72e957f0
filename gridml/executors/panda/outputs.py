"""Getting a finished PanDA trial's outputs back: from its output datasets into the workdir.

The pilot staged the trial's files out into the task's output containers (one per file, named as
prun names them), as ``user.<nick>.<jediTaskID>._<serial>.<file>``. When the task is over,
:func:`collect_outputs` finds this task's files there through the data backend (local store or
Rucio), downloads metrics.jsonl and result.json into ``<workdir>/outputs`` for the controller, and
reports every stored file; :func:`log_tail` reads the job's log tarball for a failed trial.
An optional output the job did not write (model.onnx after a failed export, its reason in
provenance.json) has no file in its container and is simply not among them.
"""

from __future__ import annotations

import io
import json
import logging
import tarfile
import tempfile
from pathlib import Path
from typing import Any

from gridml.data.base import DataManager, FileInfo
from gridml.errors import DataError, ExecutorError, NotFoundError
from gridml.executors.logs import LINES, tail_of_text
from gridml.executors.panda.render import exec_string, output_items, panda_did, unpack_option

log = logging.getLogger("gridml.executors.panda")
FOR_CONTROLLER = ("metrics.jsonl", "result.json")  # what the controller reads from <workdir>/outputs


def trial_doc_of(params: dict[str, Any]) -> dict[str, Any]:
    """The trial file a task carries (its exec string), e.g. to find the trial's workdir."""
    try:
        return dict(json.loads(unpack_option(exec_string(params), "--trial")))
    except (ValueError, IndexError, OSError, EOFError) as exc:
        raise ExecutorError(f"task {params.get('taskName')} was not made by gridml "
                            f"(no trial file in its exec string: {exc})") from None


def task_files(data: DataManager, container: str, lfn_template: str, task_id: int) -> list[FileInfo]:
    """This task's files in an output container, newest serial number last."""
    prefix = lfn_template.split("$JEDITASKID", 1)[0] + f"{task_id}."
    suffix = lfn_template.rsplit("}", 1)[-1]
    try:
        files = data.list_files(panda_did(container))
    except NotFoundError:
        return []
    return sorted((f for f in files if f.did.name.startswith(prefix) and f.did.name.endswith(suffix)),
                  key=lambda f: f.did.name)


def collect_outputs(data: DataManager, params: dict[str, Any], task_id: int,
                    output_dir: Path) -> list[dict[str, Any]]:
    """[{did, name, bytes, adler32}] of the task's stored outputs; the controller's files fetched."""
    stored = []
    output_dir.mkdir(parents=True, exist_ok=True)
    for item in output_items(params):
        files = task_files(data, item["dataset"], item["value"], task_id)
        if not files:
            if item.get("allowNoOutput"):
                log.info("task %d: no %s (the job may leave it unwritten; provenance.json says why)",
                         task_id, item["value"].rsplit("}.", 1)[-1])
            continue
        f = files[-1]
        stored.append({"did": str(f.did), "name": f.did.name, "bytes": f.bytes, "adler32": f.adler32})
        plain = item["value"].rsplit("}.", 1)[-1]
        if plain in FOR_CONTROLLER:
            _fetch_as(data, str(f.did), output_dir / plain)
    return stored


def _fetch_as(data: DataManager, did: str, dest: Path) -> None:
    with tempfile.TemporaryDirectory(dir=dest.parent, prefix=".fetch-") as tmp:
        paths = data.download(did, Path(tmp))
        if len(paths) != 1:
            raise DataError(f"{did}: expected one file, got {len(paths)}")
        Path(paths[0]).replace(dest)


def log_tail(data: DataManager, params: dict[str, Any], task_id: int, lines: int = LINES) -> str:
    """The last lines of the job's payload log (from the log tarball), or '' when there is none."""
    log = params.get("log")
    if not log:
        return ""
    files = task_files(data, log["dataset"], log["value"].replace("${SN}", "${SN/P}"), task_id)
    if not files:
        return ""
    with tempfile.TemporaryDirectory(prefix="gridml-log-") as tmp:
        path = data.download(str(files[-1].did), Path(tmp))[0]
        return _tail_of_tarball(Path(path), lines)


def _tail_of_tarball(path: Path, lines: int) -> str:
    try:
        with tarfile.open(path) as tar:
            for member in tar.getmembers():
                if member.isfile() and member.name.endswith(("payload.log", "payload.stdout")):
                    fh = tar.extractfile(member)
                    text = io.TextIOWrapper(fh, errors="replace").read() if fh else ""
                    return tail_of_text(text, lines)
    except (tarfile.TarError, OSError) as exc:
        return f"(log tarball {path.name} unreadable: {exc})"
    return ""
