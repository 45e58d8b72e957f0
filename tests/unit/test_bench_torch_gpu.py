"""benchmarks/torch_gpu.py (the PyTorch-on-GPU benchmark): its GPU sampling and its trial
document. Its tiny run (minutes) is in tests/integration/test_bench_torch_gpu_run.py."""

from __future__ import annotations

import importlib.util
import os
import stat
import time
from pathlib import Path
from types import ModuleType

import pytest

from tests.helpers import wait_for

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "torch_gpu.py"


def _bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_torch_gpu", SCRIPT)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_nvidia_smi_lines_and_windows() -> None:
    b = _bench()
    text = ("2025/01/02 10:00:00.000, 0, 10, 500\n2025/01/02 10:00:00.000, 1, 0, 5\n"
            "garbage line\n2025/01/02 10:00:01.000, 0, 90, 1500\n"
            "2025/01/02 10:00:01.000, 1, 2, 5\n2025/01/02 10:00:02.000, 0, 80, 1400\n")
    rows = b.parse_smi(text)
    assert len(rows) == 5 and {r[1] for r in rows} == {0, 1}
    t1 = rows[2][0]  # the second sample of GPU 0
    w = b.summarize(rows, t1 - 0.01, t1 + 1.01)  # its last two samples
    assert w["gpu"] == 0 and w["util_mean"] == 85.0 and w["util_max"] == 90.0
    assert w["mem_max_mib"] == 1500 and w["per_gpu"][1]["util_mean"] == 2.0
    assert b.summarize(rows, 0, 1) is None


def test_sampler_runs_nvidia_smi_in_the_background(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    fake = tmp_path / "bin" / "nvidia-smi"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\nwhile true; do\n"
                    "  echo \"$(date '+%Y/%m/%d %H:%M:%S.%N' | cut -c1-23), 0, 42, 1234\"\n"
                    "  sleep 0.05\ndone\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{fake.parent}:{os.environ['PATH']}")
    b = _bench()
    s = b.GpuSampler(tmp_path, 30, cuda=True)
    s.start()
    try:
        assert s.kind == "nvidia-smi"
        t0 = time.time()
        into: dict = {}

        def three_samples() -> bool:  # the fake prints one every 0.05 s
            s.measure(into, t0, time.time())
            return (into.get("gpu") or {}).get("samples", 0) >= 3

        wait_for(three_samples, 30, lambda: f"3 nvidia-smi samples: {into}", interval=0.1)
    finally:
        s.stop()
    assert s.proc is not None and s.proc.poll() is not None  # stopped
    assert into["gpu"]["util_mean"] == 42.0 and into["gpu"]["mem_max_mib"] == 1234
    assert into["gpu"]["samples"] >= 3


def test_cpu_sampler_is_off() -> None:
    b = _bench()
    s = b.GpuSampler(Path("/nonexistent"), 30, cuda=False)
    s.start()
    assert s.kind is None and s.window(0, time.time()) is None
    assert b.gpu_cell(None, False, None) == "n/a (no GPU)"


def test_the_trial_document_is_one_the_payload_reads(tmp_path: Path) -> None:
    from payloads.runtime.trial import CONTRACT_VERSION, load_trial

    b = _bench()
    a = b.parse(["--quick", "--mixed-precision", "bf16", "--reader-processes", "2",
                 "--out", str(tmp_path / "r.json")])
    train = b.write_split(tmp_path, "train", 5000, 2, 1024, "gzip", 1)
    trial = b.make_trial(tmp_path / "t", "quickstart", b.QUICKSTART_MODEL, b.QUICKSTART_HPARAMS,
                         train, train[:1], a, ranks=1, cuda=True, cores=8)
    doc = load_trial(trial)
    assert doc.version == CONTRACT_VERSION and doc.training.framework == "torch"
    assert doc.training.mixed_precision == "bf16" and doc.gpus == 1 and doc.cores == 8
    assert doc.training.options.reader_processes == 2 and doc.api is None
    assert doc.training.epochs == 2 and doc.training.batch_size == 256
    import h5py

    with h5py.File(train[0]) as f:
        assert f["x"].shape == (2500, 10) and f["x"].chunks == (1024, 10)
        assert f["x"].compression == "gzip" and f["y"].shape == (2500,)
