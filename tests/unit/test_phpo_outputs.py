"""The phpo evaluation tarball (gridml.executors.panda.phpo_outputs): evaluation.json first with every
member's sha256, records before the model; the controller reads the records only; `gridml fetch`
unpacks every member under a local trial's names and refuses a member that does not match."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from pathlib import Path

import pytest

from gridml.errors import ChecksumError
from gridml.executors.panda import phpo_outputs
from gridml.planner import output_files

SOURCE = b"def build_model(hparams, input_shape):\n    return None\n"


def job(tmp: Path, source: bytes = SOURCE) -> tuple[Path, Path]:
    out = tmp / "outputs"
    out.mkdir(parents=True)
    (out / "metrics.jsonl").write_text('{"epoch": 1, "metrics": {"val_loss": 0.5}}\n')
    (out / "result.json").write_text('{"objective_metrics": {"val_loss": 0.5}}')
    (out / "provenance.json").write_text(json.dumps(
        {"model": {"sha256": hashlib.sha256(SOURCE).hexdigest(), "copy": "model_source.py"}}))
    (out / "curves.png").write_bytes(b"\x89PNG fake")
    (out / "model_source.py").write_bytes(source)
    (out / "model.pt").write_bytes(bytes(range(256)) * 64)
    (out / "model.onnx").write_bytes(b"onnx" * 100)
    (out / "checkpoint.pt").write_bytes(b"not an output")
    log = tmp / "payload.log"
    log.write_text("trained\n")
    return out, log


def test_the_tarball_lists_every_member_first_and_keeps_the_model_last(tmp_path: Path) -> None:
    out, log = job(tmp_path)
    packed = phpo_outputs.pack(tmp_path / "metrics.tgz", out, log, {"hparams": {"u": 1}, "loss": 0.5})
    assert packed[0] == "evaluation.json" and "checkpoint.pt" not in packed
    assert packed[-3:] == ["model_source.py", "model.pt", "model.onnx"]  # the model last
    assert packed[1:-3] == [*phpo_outputs.RECORDS]
    for framework in ("keras", "torch"):  # every model output a grid trial returns
        assert set(output_files(framework)) == set(phpo_outputs.METRIC_FILES) | set(
            phpo_outputs.FIGURE_FILES) | (
            set(phpo_outputs.MODEL_FILES) - {"model.pt" if framework == "keras" else "model.keras"})
    with tarfile.open(tmp_path / "metrics.tgz") as tar:
        ev = json.load(tar.extractfile("evaluation.json"))  # type: ignore[arg-type]
    assert ev["loss"] == 0.5 and set(ev["files"]) == set(packed) - {"evaluation.json"}
    assert ev["files"]["model.pt"] == {"bytes": 256 * 64, "sha256": hashlib.sha256(
        (out / "model.pt").read_bytes()).hexdigest()}


def test_a_classifier_s_figures_go_between_the_records_and_the_model(tmp_path: Path) -> None:
    out, log = job(tmp_path)
    for name in ("roc.json", "roc.png", "scores.png"):
        (out / name).write_text(name)
    packed = phpo_outputs.pack(tmp_path / "metrics.tgz", out, log, {"loss": 0.5})
    assert packed[1:] == [*phpo_outputs.RECORDS, "roc.json", "roc.png", "scores.png",
                          "model_source.py", "model.pt", "model.onnx"]
    dest = tmp_path / "fetched"
    phpo_outputs.unpack(tmp_path / "metrics.tgz", dest, lambda n: f"qg.trial-0001.{n}")
    assert (dest / "qg.trial-0001.roc.json").read_text() == "roc.json"


def test_the_controller_reads_the_records_not_the_model(tmp_path: Path) -> None:
    out, log = job(tmp_path)
    phpo_outputs.pack(tmp_path / "metrics.tgz", out, log, {"loss": 0.5})
    got = phpo_outputs.read_records(tmp_path / "metrics.tgz", tmp_path / "records")
    assert set(got) == {"evaluation.json", *phpo_outputs.RECORDS}
    assert sorted(p.name for p in (tmp_path / "records").iterdir()) == sorted(got)


def test_fetch_unpacks_every_member_under_a_trial_s_names(tmp_path: Path) -> None:
    out, log = job(tmp_path)
    phpo_outputs.pack(tmp_path / "metrics.tgz", out, log, {"loss": 0.5})
    assert phpo_outputs.is_evaluation_tarball(tmp_path / "metrics.tgz")
    files = phpo_outputs.unpack(tmp_path / "metrics.tgz", tmp_path / "got", lambda n: f"s.trial-0003.{n}")
    names = {p.name for p in files}
    assert {"s.trial-0003.model.pt", "s.trial-0003.model.onnx", "s.trial-0003.model_source.py",
            "s.trial-0003.provenance.json", "s.trial-0003.evaluation.json"} <= names
    assert (tmp_path / "got" / "s.trial-0003.model.pt").read_bytes() == (out / "model.pt").read_bytes()
    assert not any(p.name.startswith(".") for p in (tmp_path / "got").iterdir())


def retar(src: Path, dest: Path, change: dict[str, bytes]) -> None:
    """``src`` rewritten with some members' bytes replaced (evaluation.json left as it was)."""
    with tarfile.open(src) as tin, tarfile.open(dest, "w:gz") as tout:
        for m in tin.getmembers():
            data = change.get(m.name, tin.extractfile(m).read())  # type: ignore[union-attr]
            info = tarfile.TarInfo(m.name)
            info.size = len(data)
            tout.addfile(info, io.BytesIO(data))


def test_a_damaged_member_is_refused_by_name_and_not_kept(tmp_path: Path) -> None:
    out, log = job(tmp_path)
    phpo_outputs.pack(tmp_path / "metrics.tgz", out, log, {"loss": 0.5})
    retar(tmp_path / "metrics.tgz", tmp_path / "bad.tgz", {"model.pt": b"truncated"})
    with pytest.raises(ChecksumError, match=r"bad\.tgz: model\.pt has sha256 .*damaged.*fetch it again"):
        phpo_outputs.unpack(tmp_path / "bad.tgz", tmp_path / "got", lambda n: f"x.{n}")
    assert not (tmp_path / "got" / "x.model.pt").exists()


def test_a_model_source_other_than_the_provenance_s_is_refused(tmp_path: Path) -> None:
    out, log = job(tmp_path, source=b"def build_model(h, s):\n    return 'another'\n")
    phpo_outputs.pack(tmp_path / "metrics.tgz", out, log, {"loss": 0.5})
    with pytest.raises(ChecksumError, match="model_source.py .* provenance.json's model.sha256"):
        phpo_outputs.unpack(tmp_path / "metrics.tgz", tmp_path / "got", lambda n: n)


def test_an_older_tarball_without_the_list_still_unpacks(tmp_path: Path) -> None:
    out, log = job(tmp_path)
    with tarfile.open(tmp_path / "old.tgz", "w:gz") as tar:
        info = tarfile.TarInfo("evaluation.json")
        data = b'{"loss": 0.5, "status": 0}'
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
        for name in ("metrics.jsonl", "result.json"):
            tar.add(out / name, arcname=name)
    assert set(phpo_outputs.read_records(tmp_path / "old.tgz", tmp_path / "r")) == {
        "evaluation.json", "metrics.jsonl", "result.json"}
    assert len(phpo_outputs.unpack(tmp_path / "old.tgz", tmp_path / "u", lambda n: n)) == 3
    with tarfile.open(tmp_path / "other.tgz", "w:gz") as tar:
        tar.add(out / "result.json", arcname="result.json")
    assert not phpo_outputs.is_evaluation_tarball(tmp_path / "other.tgz")
