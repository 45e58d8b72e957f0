"""Ordinary user mistakes, one class per row, against the real `gridml` command: each prints one
clear line naming the file or field and the fix, exits non-zero, and never a traceback (issue 24,
point 6). Output paths that are folders, read-only or existing files; alias bombs, deep nesting
and oversized inputs; a database driver gridml does not support."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from gridml.controller import Campaign
from gridml.data.local import LocalStore
from gridml.executors.base import TaskStatus
from gridml.executors.dryrun import DryRunExecutor
from gridml.spec import load_spec
from gridml.store import EpochReport, open_store
from tests.helpers import gridml, register_tiny_datasets, write_spec

ROOT_USER = os.geteuid() == 0


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A GRIDML_HOME with a dataset and a study whose trial 0 is completed with outputs."""
    tmp = tmp_path_factory.mktemp("mistakes")
    home = tmp / "home"
    old = os.environ.get("GRIDML_HOME")
    os.environ["GRIDML_HOME"] = str(home)
    try:
        data = LocalStore(home / "store")
        register_tiny_datasets(data, tmp, "user.t")
        spec = write_spec(tmp / "spec.yaml", "oops", "user.t:train", "user.t:val")
        store = open_store(f"sqlite:///{home / 'gridml.db'}")
        c = Campaign(load_spec(spec, did_exists=data.exists), store, DryRunExecutor(), data,
                     home / "runs", api_url="http://127.0.0.1:9", poll_s=0)
        c.step()
        t = store.list_trials(c.study.id)[0]
        out = home / "runs" / "oops" / "trial-0000" / "outputs"
        out.mkdir(parents=True, exist_ok=True)
        (out / "metrics.jsonl").write_text(
            json.dumps(EpochReport(1, {"loss": 0.3, "val_loss": 0.4}, 1.0).to_json()) + "\n")
        (out / "result.json").write_text('{"state": "completed", "epochs": 1}')
        (out / "model.keras").write_bytes(b"model")
        c.finalize(t, TaskStatus("completed"))
        store.close()
    finally:
        if old is None:
            os.environ.pop("GRIDML_HOME", None)
        else:
            os.environ["GRIDML_HOME"] = old
    afile = tmp / "existing.txt"
    afile.write_text("keep me")
    folder = tmp / "a_folder"
    folder.mkdir()
    if ROOT_USER:  # root writes through file modes: a read-only file system instead
        readonly = Path("/sys")
    else:
        readonly = tmp / "readonly"
        readonly.mkdir()
        readonly.chmod(0o555)
    (tmp / "alias_bomb.yaml").write_text(
        "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
            f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 10)}]\n"
            for i in range(8)) + "name: bomb\n")
    (tmp / "deep.yaml").write_text("name: deep\npayload: " + "[" * 5000 + "]" * 5000 + "\n")
    (tmp / "deep.json").write_text("[" * 5000 + "]" * 5000)
    # a 10 MB iDDS input: 250,000 evaluated points (a Gaussian process over them: 460 GiB)
    (tmp / "huge_in.json").write_text(json.dumps({
        "opt_space": {"lr": {"type": "real", "low": 0.001, "high": 0.1}},
        "points": [[{"lr": 0.001 + i * 1e-7}, 0.5] for i in range(250_000)]}))
    # the same as 2.5 MB (under the size cap): the number of points is capped as well
    (tmp / "many_in.json").write_text(json.dumps({
        "opt_space": {"lr": {"type": "real", "low": 0.001, "high": 0.1}},
        "points": [[{"lr": 0.01}, 0.5] for i in range(100_000)]}))
    (tmp / "in.json").write_text(json.dumps({
        "opt_space": {"lr": {"type": "real", "low": 0.001, "high": 0.1}}, "points": []}))
    return {"tmp": tmp, "home": home, "file": afile, "folder": folder, "readonly": readonly,
            "spec": spec}


def _steer(w: dict[str, Path], *, inp: str = "in.json", out: str | Path = "out.json",
           algorithm: str = "random") -> list[str]:
    return ["steer", "--in", str(w["tmp"] / inp), "--out", str(w["tmp"] / out),
            "--num-points", "2", "--max-points", "10", "--algorithm", algorithm]


def _evaluate(w: dict[str, Path], **files: str | Path) -> list[str]:
    args = {"--evaluationInput": w["tmp"] / "in.json", "--spec": w["spec"],
            "--evaluationOutput": w["tmp"] / "output.json", **files}
    return ["evaluate", *[str(x) for kv in args.items() for x in kv]]


# (case, its argv given the world, what the one line must name)
CASES: list[tuple[str, Callable[[dict[str, Path]], list[str]], Callable[[dict[str, Path]], str]]] = [
    ("fetch -o an existing file",
     lambda w: ["fetch", "oops", "--best", "-o", str(w["file"])], lambda w: str(w["file"])),
    ("fetch -o under a read-only folder",
     lambda w: ["fetch", "oops", "--best", "-o", str(w["readonly"] / "out")],
     lambda w: str(w["readonly"] / "out")),
    ("data get -o an existing file",
     lambda w: ["data", "get", "user.t:train", "-o", str(w["file"])], lambda w: str(w["file"])),
    ("data get -o under a read-only folder",
     lambda w: ["data", "get", "user.t:train", "-o", str(w["readonly"] / "out")],
     lambda w: str(w["readonly"] / "out")),
    ("steer --out a folder", lambda w: _steer(w, out="a_folder"), lambda w: str(w["folder"])),
    ("steer --out in a read-only folder",
     lambda w: _steer(w, out=w["readonly"] / "out.json"), lambda w: str(w["readonly"] / "out.json")),
    ("steer --in 5,000-deep JSON", lambda w: _steer(w, inp="deep.json"), lambda w: "deep.json"),
    ("steer --in 10 MB with bayes", lambda w: _steer(w, inp="huge_in.json", algorithm="bayes"),
     lambda w: "huge_in.json"),
    ("steer --in 100,000 points with bayes",
     lambda w: _steer(w, inp="many_in.json", algorithm="bayes"), lambda w: "many_in.json"),
    ("evaluate --evaluationOutput a folder",
     lambda w: _evaluate(w, **{"--evaluationOutput": w["folder"]}), lambda w: str(w["folder"])),
    ("evaluate --evaluationOutput in a read-only folder",
     lambda w: _evaluate(w, **{"--evaluationOutput": w["readonly"] / "output.json"}),
     lambda w: str(w["readonly"] / "output.json")),
    ("evaluate --evaluationMetrics a folder",
     lambda w: _evaluate(w, **{"--evaluationMetrics": w["folder"]}), lambda w: str(w["folder"])),
    ("validate a YAML alias bomb", lambda w: ["validate", str(w["tmp"] / "alias_bomb.yaml")],
     lambda w: "alias_bomb.yaml"),
    ("validate 5,000-deep YAML nesting", lambda w: ["validate", str(w["tmp"] / "deep.yaml")],
     lambda w: "deep.yaml"),
    ("serve --db mysql://", lambda w: ["serve", "--db", "mysql://u@localhost/gridml"],
     lambda w: "mysql"),
]


@pytest.mark.parametrize("case, argv, names", CASES, ids=[c[0] for c in CASES])
def test_a_user_mistake_gives_one_clear_line(world: dict[str, Path], case: str,
                                             argv: Callable[[dict[str, Path]], list[str]],
                                             names: Callable[[dict[str, Path]], str]) -> None:
    proc = gridml(*argv(world), env={"GRIDML_HOME": str(world["home"])}, check=False, timeout=120)
    assert proc.returncode != 0, (case, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr + proc.stdout, (case, proc.stderr[-3000:])
    assert names(world) in proc.stderr, (case, proc.stderr[-2000:])
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert lines and len(lines) <= 3, (case, proc.stderr[-2000:])  # the problem and its fix
    assert world["file"].read_text() == "keep me"  # an existing file is never overwritten
