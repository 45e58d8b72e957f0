"""benchmarks/torch_gpu.py (the PyTorch-on-GPU benchmark) run end to end, tiny, with only
torch, h5py and numpy importable (as on a GPU node). Minutes of CPU: an integration test."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "torch_gpu.py"


@pytest.mark.usefixtures("needs_torch")
@pytest.mark.slow
def test_a_tiny_run_with_only_torch_h5py_numpy(tmp_path: Path) -> None:
    """Both parts end to end on the CPU, with TensorFlow and gridml's controller packages made
    unimportable in the benchmark's process; every figure lands in the JSON."""
    out = tmp_path / "res" / "torch_gpu.json"
    code = textwrap.dedent(f"""
        import runpy, sys
        for name in ("tensorflow", "keras", "horovod", "pydantic", "yaml", "fastapi",
                     "sqlalchemy", "gridml"):
            sys.modules[name] = None
        sys.argv = ["torch_gpu.py", "--quick", "--rows", "6000", "--epochs", "2",
                    "--batch", "128", "--seconds-naive", "1", "--seconds-b", "2",
                    "--naive-workers", "2", "--warmup", "2", "--out", {str(out)!r}]
        runpy.run_path({str(SCRIPT)!r}, run_name="__main__")
    """)
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                          text=True, timeout=400, env={**os.environ, "OUT": ""})
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert "| quickstart | 4,929 |" in proc.stdout and "n/a (no GPU)" in proc.stdout
    res = json.loads(out.read_text())
    for name in ("quickstart", "wide"):
        a = res["part_a"][name]
        assert a["rc"] == 0 and a["epochs"] == 2 and a["later"]["samples_per_s"] > 0
        assert 0 <= a["epoch1"]["input_wait_frac"] < 1
        for feed in ("gridml", "memory", "naive"):
            f = res["part_b"][name][feed]
            assert f["samples_per_s"] > 0 and 0 <= f["input_wait_frac"] <= 1, (name, feed, f)
    assert (out.parent / "torch_gpu_logs" / "payload-wide.log").exists()
