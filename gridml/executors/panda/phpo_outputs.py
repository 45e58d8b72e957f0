"""What a phpo evaluation job returns: one tarball, the trial's metrics first and its model last.

Why one tarball and not a separate output for the model: a phpo task has exactly one output a job
stages out. panda-client's ``PhpoScript`` declares a single output template in the task's
``outDS`` (``$JEDITASKID.metrics.${SN}.tgz``, flagged ``hidden`` and ``allowNoOutput``) and hands
it to runHPO as ``--outMetricsFile=${OUTPUT0}^<--evaluationMetrics>``; runHPO knows no other
output option (``--outMetaFile`` is a small JSON document that goes to PanDA, not a staged file),
so a second declared output would have no one to rename it to its LFN and the pilot would drop it.
The metrics file is only moved and stored: neither runHPO nor iDDS reads what is inside (iDDS
gets the loss from ``output.json``, which stays a few hundred bytes: status, loss, message and the
member names). So the model travels in that file, and what phpo does parse never grows with it.

Layout (``pack``): ``evaluation.json`` first (the point, output.json's outcome, the server trial,
and ``files``: every other member's bytes and sha256), then the small records the controller
reads (metrics.jsonl, result.json, provenance.json, curves.png, payload.log), then the model
files (model_source.py, model.keras or model.pt, model.onnx when the export worked). Following
the task, the phpo executor reads the tarball as a stream and stops once it has the small records
(:func:`read_records`): a big model is downloaded with the tarball but never written into
``runs/``. ``gridml fetch`` (:func:`unpack`) writes every member as ``<study>.trial-NNNN.<file>``,
the names a local trial's outputs have, checks each against ``files`` and model_source.py against
provenance.json's ``model.sha256``, and the user gets the same files as from a local or PanDA
trial (plus the point's evaluation.json and payload.log).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import tarfile
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from gridml.errors import ChecksumError, DataError

EVALUATION = "evaluation.json"  # the point and its outcome; first member
LOG = "payload.log"
METRIC_FILES = ("metrics.jsonl", "curves.png", "provenance.json", "result.json")
# The trial's model outputs, both frameworks (whichever the job wrote): what a grid trial
# declares beyond the metric files (planner.output_files), the source first, the ONNX export last.
MODEL_FILES = ("model_source.py", "model.keras", "model.pt", "model.onnx")
# A classifier's figures of merit (none for a regression): small, packed before the models.
FIGURE_FILES = ("roc.json", "roc.png", "scores.png")
RECORDS = (*METRIC_FILES, LOG)  # what the controller reads; packed before the models


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def pack(path: Path, outputs: Path, log: Path | None, evaluation: dict[str, Any] | None) -> list[str]:
    """The evaluation tarball at ``path`` from the payload's ``outputs`` folder and its ``log``;
    ``evaluation`` goes in first as evaluation.json, with ``files`` (bytes, sha256 of each other
    member) added. Returns the member names."""
    members: list[tuple[str, Path]] = [(n, outputs / n) for n in METRIC_FILES]
    if log is not None:
        members.append((LOG, log))
    members += [(n, outputs / n) for n in (*FIGURE_FILES, *MODEL_FILES)]
    members = [(n, p) for n, p in members if p.is_file()]
    packed = []
    with tarfile.open(path, "w:gz") as tar:
        if evaluation is not None:
            files = {n: {"bytes": p.stat().st_size, "sha256": _sha256(p)} for n, p in members}
            data = json.dumps({**evaluation, "files": files}, indent=2, default=str).encode()
            info = tarfile.TarInfo(EVALUATION)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
            packed.append(EVALUATION)
        for name, p in members:
            tar.add(p, arcname=name)
            packed.append(name)
    return packed


def _plain(member: tarfile.TarInfo) -> bool:
    """A regular file at the tarball's top level (no folders, links, '..' or hidden names)."""
    return member.isfile() and "/" not in member.name and not member.name.startswith(".")


def _copy(src: IO[bytes], dest: Path) -> str:
    """Write ``src`` to ``dest`` atomically; its sha256."""
    h = hashlib.sha256()
    tmp = dest.with_name(f".{dest.name}.tmp")
    with open(tmp, "wb") as fh:
        for block in iter(lambda: src.read(1 << 20), b""):
            h.update(block)
            fh.write(block)
    os.replace(tmp, dest)
    return h.hexdigest()


UNREADABLE = (tarfile.TarError, OSError, EOFError, zlib.error)


def _unreadable(tarball: Path, exc: BaseException) -> DataError:
    return DataError(f"{tarball.name}: not a readable evaluation tarball ({exc})",
                     hint="fetch it again; if it stays unreadable the evaluation job's stage-out "
                          "was cut short")


def _listed(evaluation: Path) -> dict[str, Any] | None:
    """evaluation.json's ``files`` (None in a tarball from an older gridml evaluate)."""
    try:
        files = json.loads(evaluation.read_text()).get("files")
    except (OSError, ValueError, AttributeError):
        return None
    return files if isinstance(files, dict) else None


def read_records(tarball: Path, dest: Path) -> list[str]:
    """evaluation.json and the records (metrics.jsonl, result.json, ...) into ``dest``, the model
    files left in the tarball: the stream stops once every record evaluation.json lists is read
    (a tarball without that list, from an older gridml evaluate, is read to its end)."""
    dest.mkdir(parents=True, exist_ok=True)
    wanted: set[str] | None = None
    got: list[str] = []
    try:
        with tarfile.open(tarball, "r|*") as tar:
            for member in tar:
                if wanted is not None and wanted <= set(got):
                    break
                if not _plain(member) or member.name not in (EVALUATION, *RECORDS):
                    continue
                fh = tar.extractfile(member)
                if fh is None:
                    continue
                _copy(fh, dest / member.name)
                got.append(member.name)
                if member.name == EVALUATION:
                    listed = _listed(dest / EVALUATION)
                    wanted = None if listed is None else {n for n in listed if n in RECORDS}
    except UNREADABLE as exc:
        raise _unreadable(tarball, exc) from None
    return got


def is_evaluation_tarball(path: Path) -> bool:
    """A tarball ``gridml evaluate`` made (its first member is evaluation.json)."""
    try:
        with tarfile.open(path, "r|*") as tar:
            first = tar.next()
            return first is not None and first.name == EVALUATION
    except UNREADABLE:
        return False


def unpack(tarball: Path, dest: Path, name_of: Callable[[str], str]) -> list[Path]:
    """Every member of an evaluation tarball into ``dest`` as ``name_of(member)``, each checked
    against evaluation.json's ``files``, and model_source.py against provenance.json's
    ``model.sha256``. A file that does not match is removed and ChecksumError names it."""
    dest.mkdir(parents=True, exist_ok=True)
    files: dict[str, Any] | None = None
    written: dict[str, tuple[Path, str]] = {}
    try:
        with tarfile.open(tarball, "r|*") as tar:
            for member in tar:
                fh = tar.extractfile(member) if _plain(member) else None
                if fh is None:
                    continue
                target = dest / name_of(member.name)
                written[member.name] = (target, _copy(fh, target))
                if member.name == EVALUATION:
                    files = _listed(target)
    except UNREADABLE as exc:
        raise _unreadable(tarball, exc) from None
    for name, (target, digest) in written.items():
        expected = (files or {}).get(name, {}).get("sha256") if name != EVALUATION else None
        if expected and expected != digest:
            target.unlink()
            raise ChecksumError(f"{tarball.name}: {name} has sha256 {digest[:12]}… but the "
                                f"tarball's {EVALUATION} records {str(expected)[:12]}…: the tarball "
                                f"is damaged ({target.name} not kept)",
                                hint="fetch it again (gridml fetch ...); if it still differs, the "
                                     "evaluation job's output is corrupt in the store")
    missing = sorted(set(files or {}) - set(written))
    if missing:
        raise DataError(f"{tarball.name}: {', '.join(missing)} listed in its {EVALUATION} but not "
                        "in the tarball: it is truncated", hint="fetch it again (gridml fetch ...)")
    _check_source(tarball, written)
    return [target for target, _ in written.values()]


def _check_source(tarball: Path, written: dict[str, tuple[Path, str]]) -> None:
    """model_source.py is the code provenance.json says built the model (its ``model.sha256``)."""
    if "model_source.py" not in written or "provenance.json" not in written:
        return
    try:
        prov = json.loads(written["provenance.json"][0].read_text())
        recorded = (prov.get("model") or {}).get("sha256")
    except (OSError, ValueError, AttributeError):
        return
    target, digest = written["model_source.py"]
    if recorded and recorded != digest:
        raise ChecksumError(f"{tarball.name}: model_source.py ({target.name}) has sha256 "
                            f"{digest[:12]}… but provenance.json's model.sha256 is {recorded[:12]}…",
                            hint="the tarball mixes files of two runs: fetch it again, or rebuild "
                                 "the model from the model file named in provenance.json")
