"""The PyTorch payload under numpy 2.x (issue 13: GPU nodes bring their own PyTorch environment,
numpy 1.26 or 2.x). The main environment holds numpy 1.26 (TensorFlow 2.15 needs it); these tests
run in the numpy-2 layer scripts/setup.sh builds beside it (requirements/numpy2.txt, linked as
`.venv-numpy2`, or $GRIDML_NUMPY2_PYTHON): numpy 2 + h5py of its own, torch from the main
environment. A whole trial under ``python -m torch.distributed.run`` with 2 ranks, the loader's
epochs, and the payload runtime's TensorFlow-free unit tests, each in that interpreter."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from test_payload_train import ROOT, write_trial

pytestmark = pytest.mark.slow

# The payload runtime's unit tests that need no TensorFlow (test_input_ragged's tf.data case is
# deselected below); run again under numpy 2.
UNIT_TESTS = ["tests/unit/test_input_plan.py", "tests/unit/test_input_direct.py",
              "tests/unit/test_input_ragged.py", "tests/unit/test_input_slabs.py",
              "tests/unit/test_torch_payload.py",
              "tests/unit/test_trial_contract.py"]


def _numpy2_python() -> Path:
    path = Path(os.environ.get("GRIDML_NUMPY2_PYTHON") or ROOT / ".venv-numpy2/bin/python")
    if not path.exists():  # scripts/test.sh runs setup.sh, which always builds it
        pytest.fail(f"no numpy-2 interpreter at {path}: run scripts/setup.sh (builds it in seconds)")
    return path


@pytest.fixture(scope="module")
def np2() -> Path:
    return _numpy2_python()


def _env(np2: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = f"{np2.parent}:{env.get('PATH', '')}"
    env["PYTHONPATH"] = f"{ROOT}:{ROOT / 'examples'}"
    return env


def _run(np2: Path, args: list[str], cwd: Path, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run([str(np2), *args], cwd=cwd, env=_env(np2), capture_output=True,
                          text=True, timeout=timeout)


@pytest.mark.usefixtures("needs_torch")
def test_the_layer_puts_numpy_2_before_the_main_environments_numpy(np2: Path) -> None:
    proc = _run(np2, ["-c", "import numpy, h5py, torch; print(numpy.__version__, numpy.__file__,"
                            " h5py.__version__, torch.__version__)"], ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    version, where, _, _ = proc.stdout.split()
    assert int(version.split(".")[0]) == 2
    assert Path(where).resolve().is_relative_to(np2.parent.parent.resolve())  # the layer's own
    assert "compiled using NumPy 1.x" not in proc.stderr


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[Path], list[Path]]:
    from make_sample_data import make_sample_data

    return make_sample_data(tmp_path_factory.mktemp("data"), n_train=800, n_val=300, n_files=2)


@pytest.mark.usefixtures("needs_torch")
def test_a_torch_trial_with_two_ranks_under_numpy_2(np2: Path, tmp_path: Path, small: tuple) -> None:
    trial = write_trial(tmp_path, *small, training={"framework": "torch", "epochs": 2,
                                                    "batch_size": 64},
                        model_file=str(ROOT / "examples/models/deepsets_torch.py"))
    proc = _run(np2, ["-m", "torch.distributed.run", "--nnodes", "1", "--nproc-per-node", "2",
                      "--rdzv-backend", "c10d", "--rdzv-endpoint", "localhost:0",
                      "-m", "payloads.train_torch", str(trial)], tmp_path)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "compiled using NumPy 1.x" not in proc.stderr  # no numpy-1 extension was loaded
    out = tmp_path / "outputs"
    reports = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in reports] == [1, 2]
    for r in reports:
        assert {"loss", "accuracy", "auc", "val_loss", "val_accuracy", "val_auc"} <= set(r["metrics"])
        assert all(v == v for v in r["metrics"].values())  # no NaN
        assert r["extra"]["ranks"] == 2 and r["extra"]["train_samples"] == 800
    prov = json.loads((out / "provenance.json").read_text())
    assert prov["framework"] == "torch"
    assert int(prov["runtime"]["numpy"].split(".")[0]) == 2, prov["runtime"]
    assert prov["runtime"]["onnx"]["verified"] is True, prov["runtime"]["onnx"]
    assert json.loads((out / "result.json").read_text())["state"] == "completed"

    # model.pt loads and rebuilds (under numpy 2) into a module that gives finite outputs
    check = _run(np2, ["-c", f"""
import numpy as np, torch
from payloads.runtime.torch_model import rebuild
saved = torch.load({str(out / 'model.pt')!r}, weights_only=False)
assert saved["framework"] == "torch" and saved["state_dict"], sorted(saved)
model = rebuild({str(out / 'model.pt')!r})
rows = np.random.default_rng(1).normal(size=(6, 10)).astype("f4")
with torch.no_grad():
    y = model(torch.from_numpy(rows)).numpy()
assert y.shape[0] == 6 and np.isfinite(y).all(), y
print("numpy", np.__version__)
"""], tmp_path)
    assert check.returncode == 0, check.stderr[-3000:]
    assert check.stdout.startswith("numpy 2.")


LOADER_CHECK = """
import sys, h5py, numpy as np
from payloads.runtime.pipeline.h5source import H5Source
from payloads.runtime.pipeline.inputs import ShardedLoader
from payloads.runtime.trial import load_trial

def rows(x, y):  # one comparable record per (features, label) row
    xy = np.concatenate([x.reshape(len(x), -1), y.reshape(len(y), -1)], 1)
    return np.ascontiguousarray(xy).view(np.dtype((np.void, xy.dtype.itemsize * xy.shape[1])))[:, 0]

if __name__ == "__main__":  # reader processes are spawned: they import this file
    doc = load_trial(sys.argv[1])
    paths = list(doc.data.train)
    want = []
    for p in paths:
        with h5py.File(p) as f:
            want.append(rows(f["x"][:], f["y"][:]))
    want = np.sort(np.concatenate(want))
    assert len(np.unique(want)) == len(want)  # rows are distinct, so "once" is checkable
    orders = []
    for epoch in (1, 2, 3):
        got = []
        for rank in range(2):  # rank 1 reads in a reader process, rank 0 in a thread
            loader = ShardedLoader(H5Source(paths, ["x", "y"]), ["x"], "y", batch=64, rank=rank,
                                   ranks=2, seed=doc.seed, window=2, processes=rank)
            for slab in loader.slabs([epoch], reuse=True):
                x = slab["x"].reshape(-1, slab["x"].shape[-1])
                got.append(rows(x, slab["y"].reshape(-1)).copy())
            loader.close()
        got = np.concatenate(got)
        assert np.array_equal(np.sort(got), want), (epoch, len(got), len(want))
        orders.append(got)
    assert not np.array_equal(orders[0], orders[1]) and not np.array_equal(orders[1], orders[2])
    print("ok", sys.version.split()[0], np.__version__, len(want))
"""


def _check_loader(python: Path, tmp_path: Path, small: tuple) -> str:
    """The trial's training files read as torch reads them (2 ranks, recycled slabs) by
    ``python``: per epoch every (x, y) row of the files exactly once over the ranks, in an order
    that differs between epochs. Returns what the check printed."""
    trial = write_trial(tmp_path, *small, training={"framework": "torch"},
                        model_file=str(ROOT / "examples/models/deepsets_torch.py"))
    script = tmp_path / "loader_check.py"
    script.write_text(LOADER_CHECK)
    proc = _run(python, [str(script), str(trial)], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def test_the_loaders_epochs_cover_every_row_once_under_numpy_2(np2: Path, tmp_path: Path,
                                                               small: tuple) -> None:
    assert _check_loader(np2, tmp_path, small).split()[2].startswith("2.")


def _other_pythons() -> list[str]:
    """$GRIDML_PAYLOAD_PYTHONS (space-separated), else the Python 3.12/3.13 venvs (numpy 2,
    h5py) scripts/setup.sh built for the interpreters this machine has (.payload-pythons)."""
    listed = ROOT / ".payload-pythons"
    named = os.environ.get("GRIDML_PAYLOAD_PYTHONS", "").split()
    return named or (listed.read_text().split() if listed.exists() else [])


@pytest.mark.parametrize("python", _other_pythons() or [None])
def test_the_loader_under_another_python(python: str | None, tmp_path: Path, small: tuple) -> None:
    """Python 3.12/3.13 (what GPU nodes may bring): the payload runtime's loader and trial
    contract under each such interpreter this machine has, with numpy 2 and h5py, no torch
    (torch for those Pythons would be a CUDA build of several GB)."""
    if python is None:
        pytest.skip("this machine has no Python 3.12 or 3.13: a fresh CI machine has only 3.11, "
                    "and neither PyPI nor Debian 12's packages (what setup may install from) "
                    "offer a CPython 3.12/3.13; scripts/setup.sh builds a venv for each one it "
                    "finds (PATH, ~/.pyenv), and GRIDML_PAYLOAD_PYTHONS names others")
    assert _check_loader(Path(python), tmp_path, small).startswith("ok ")


def test_the_payload_runtime_unit_tests_pass_under_numpy_2(np2: Path) -> None:
    proc = _run(np2, ["-m", "pytest", "-p", "no:cacheprovider", "-q", "-x", "--timeout=600",
                      "--deselect", "tests/unit/test_input_ragged.py::test_ragged_through_tf_data",
                      *UNIT_TESTS], ROOT, timeout=900)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert " passed" in proc.stdout and " failed" not in proc.stdout
