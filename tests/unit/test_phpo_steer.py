"""`gridml steer`: iDDS's steering contract on recorded IN files, both forms, both space formats,
and compatibility with hpogrid 1.3.3's own steering (`SteeringIDDS`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import ROOT

HPOGRID_SPACE = {
    "learning_rate": {"method": "loguniform", "dimension": {"low": 1e-4, "high": 0.1, "base": 10}},
    "units": {"method": "uniformint", "dimension": {"low": 8, "high": 64}},
    "dropout": {"method": "uniform", "dimension": {"low": 0.0, "high": 0.5}},
    "activation": {"method": "categorical", "dimension": {"categories": ["relu", "tanh"],
                                                           "grid_search": 0}},
}
GRIDML_SPACE = {
    "learning_rate": {"type": "real", "low": 1e-4, "high": 0.1, "log": True},
    "units": {"type": "int", "low": 8, "high": 64},
    "dropout": {"type": "real", "low": 0.0, "high": 0.5},
    "activation": {"type": "categorical", "choices": ["relu", "tanh"]},
}
POINTS = [  # as iDDS records them: evaluated, a 0.0 result, a pending one (null)
    [{"learning_rate": 0.01, "units": 16, "dropout": 0.1, "activation": "relu"}, 0.52],
    [{"learning_rate": 0.002, "units": 40.0, "dropout": 0.3, "activation": "tanh"}, 0.0],
    [{"learning_rate": 0.05, "units": 8, "dropout": 0.0, "activation": "relu"}, None],
]


def steer(tmp: Path, doc: object, *args: str, out: str = "out.json") -> subprocess.CompletedProcess:
    (tmp / "in.json").write_text(json.dumps(doc))
    return subprocess.run([sys.executable, "-m", "gridml.cli", "steer", "--in", str(tmp / "in.json"),
                           "--out", str(tmp / out), *args], capture_output=True, text=True,
                          timeout=120, cwd=ROOT, check=False)


@pytest.mark.parametrize("space", [HPOGRID_SPACE, GRIDML_SPACE], ids=["hpogrid", "gridml"])
def test_new_points_in_the_space_none_pending_reproducible(tmp_path: Path, space: dict) -> None:
    doc = {"points": POINTS, "opt_space": space}
    proc = steer(tmp_path, doc, "--num-points", "3", "--max-points", "10", "--seed", "5")
    assert proc.returncode == 0, proc.stderr
    new = json.loads((tmp_path / "out.json").read_text())
    assert len(new) == 3 and all(set(p) == set(GRIDML_SPACE) for p in new)
    assert all(8 <= p["units"] <= 64 and isinstance(p["units"], int) for p in new)
    assert all(1e-4 <= p["learning_rate"] <= 0.1 for p in new)
    assert POINTS[2][0] not in new and POINTS[0][0] not in new  # pending/told never again
    again = steer(tmp_path, doc, "--num-points", "3", "--max-points", "10", "--seed", "5",
                  out="again.json")
    assert again.returncode == 0 and (tmp_path / "again.json").read_text() == \
        (tmp_path / "out.json").read_text()


def test_the_budget_counts_every_point_in_in(tmp_path: Path) -> None:
    doc = {"points": POINTS, "opt_space": HPOGRID_SPACE}
    assert steer(tmp_path, doc, "--num-points", "5", "--max-points", "4").returncode == 0
    assert len(json.loads((tmp_path / "out.json").read_text())) == 1  # 4 - 3 in IN
    assert steer(tmp_path, doc, "--num-points", "5", "--max-points", "3").returncode == 0
    assert json.loads((tmp_path / "out.json").read_text()) == []  # spent: []


def test_the_segmented_form(tmp_path: Path) -> None:
    doc = {"points": [[[0, POINTS[0][0]], 0.3], [[1, POINTS[1][0]], None]],
           "opt_space": [{"model_id": 0, "search_space": HPOGRID_SPACE},
                         {"model_id": 1, "search_space": GRIDML_SPACE}]}
    proc = steer(tmp_path, doc, "--num-points", "4", "--max-points", "20", "--algorithm", "random")
    assert proc.returncode == 0, proc.stderr
    new = json.loads((tmp_path / "out.json").read_text())
    assert sorted(m for m, _ in new) == [0, 0, 1, 1] and all(set(p) == set(GRIDML_SPACE) for _, p in new)


@pytest.mark.parametrize("doc,says", [
    ({"points": [[{"learning_rate": 5.0}, 1.0]], "opt_space": GRIDML_SPACE}, "points[0][0]"),
    ({"points": [[{**POINTS[0][0]}, "bad"]], "opt_space": GRIDML_SPACE}, "points[0][1]"),
    ({"points": [], "opt_space": {"x": {"method": "qnormal", "dimension": {}}}}, "qnormal"),
    ({"points": [], "opt_space": {"x": {"type": "real", "low": 2, "high": 1}}}, "opt_space: x"),
    ({"points": [[[7, POINTS[0][0]], 1.0]], "opt_space": [{"model_id": 0, "search_space": GRIDML_SPACE}]},
     "model_id 7"),
    ([1, 2], "JSON object"),
])
def test_malformed_input_is_one_line_and_no_out(tmp_path: Path, doc: object, says: str) -> None:
    proc = steer(tmp_path, doc, "--num-points", "2", "--max-points", "10")
    assert proc.returncode != 0 and not (tmp_path / "out.json").exists()
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "in.json" in lines[0] and says in lines[0], proc.stderr


def _hpogrid_python() -> Path:
    """hpogrid's interpreter: the layer scripts/setup.sh builds beside the environment (hpogrid
    and its pandas, kept out of the environment: Keras imports pandas whenever it can)."""
    path = Path(os.environ.get("GRIDML_HPOGRID_PYTHON") or ROOT / ".venv-hpogrid/bin/python")
    if not path.exists():
        message = f"no hpogrid interpreter at {path}: run scripts/setup.sh (builds it in seconds)"
        if os.environ.get("CI"):  # scripts/test.sh runs setup.sh, which always builds it
            pytest.fail(message)
        pytest.skip(message)
    return path


def hpogrid_steers(python: Path, infile: Path, outfile: Path, n_point: int) -> None:
    """hpogrid 1.3.3's own iDDS steering (``SteeringIDDS.run_generator``, skopt) on ``infile``."""
    code = ("import sys; from hpogrid.interface.idds.steering import SteeringIDDS; "
            "SteeringIDDS().run_generator(space=None, n_point=int(sys.argv[3]), lib='skopt', "
            "max_point=10, infile=sys.argv[1], outfile=sys.argv[2])")
    proc = subprocess.run([str(python), "-c", code, str(infile), str(outfile), str(n_point)],
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr


def test_hpogrid_writes_the_same_shape_and_reads_what_follows_gridml(tmp_path: Path) -> None:
    python = _hpogrid_python()
    for doc in ({"points": [[p, v] for p, v in POINTS], "opt_space": HPOGRID_SPACE},
                {"points": [[[0, POINTS[0][0]], 0.3]],
                 "opt_space": [{"model_id": 0, "search_space": HPOGRID_SPACE}]}):
        assert steer(tmp_path, doc, "--num-points", "2", "--max-points", "10").returncode == 0
        ours = json.loads((tmp_path / "out.json").read_text())
        hpogrid_steers(python, tmp_path / "in.json", tmp_path / "theirs.json", 2)
        theirs = json.loads((tmp_path / "theirs.json").read_text())
        # hpogrid also takes the pending points off NUM_POINTS; iDDS already did (it asks for
        # nPointsPerIteration minus the unevaluated ones), so gridml proposes NUM_POINTS
        pending = sum(1 for _, v in doc["points"] if v is None)
        assert len(ours) == 2 and len(theirs) == 2 - pending
        for a, b in zip(ours, theirs):  # the same shape: {hp} or [model_id, {hp}]
            assert type(a) is type(b)
            pa, pb = (a[1], b[1]) if isinstance(a, list) else (a, b)
            assert a[0] == b[0] if isinstance(a, list) else True
            assert set(pa) == set(pb) == set(GRIDML_SPACE)
        # iDDS's next IN: our points evaluated, one pending; hpogrid reads it and steers on
        follow = {"points": doc["points"] + [[p, 0.1 * i if i else None] for i, p in enumerate(ours)],
                  "opt_space": doc["opt_space"]}
        (tmp_path / "next.json").write_text(json.dumps(follow))
        hpogrid_steers(python, tmp_path / "next.json", tmp_path / "theirs2.json", 3)
        assert isinstance(json.loads((tmp_path / "theirs2.json").read_text()), list)
