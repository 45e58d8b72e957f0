"""Many input files: the LRU of open files (bounded descriptors, pinned files kept, closing by
dropping identifiers), the window-of-files shuffle (every block once, at most ``cycle`` files
active at a time, its mixing against the full permutation), a file of another shape named,
running out of descriptors (exit code 2, the limit and the fix), and validate's check."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import h5py
import numpy as np
import pytest

from gridml.data.limits import open_files_problem
from payloads.runtime.errors import InputDataError
from payloads.runtime.pipeline import plan
from payloads.runtime.pipeline.h5source import H5Source, OpenFiles, default_max_open
from payloads.runtime.pipeline.inputs import ShardedLoader

ROOT = Path(__file__).resolve().parents[2]


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.fixture(scope="module")
def many(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """60 files of 30 rows (chunks of 10): row i of file k holds the number 1000 k + i."""
    d = tmp_path_factory.mktemp("many")
    paths = []
    for k in range(60):
        p = d / f"f{k:03d}.h5"
        ids = 1000 * k + np.arange(30)
        with h5py.File(p, "w") as f:
            f.create_dataset("x", data=np.stack([ids, ids], 1).astype(np.float32), chunks=(10, 2))
            f.create_dataset("y", data=ids.astype(np.int64), chunks=(10,))
        paths.append(str(p))
    return paths


def test_lru_bounds_descriptors_and_keeps_pinned_files(many: list[str]) -> None:
    pool, base = OpenFiles(4), _fds()
    for p in many[:20]:
        with pool.use(p) as e:
            assert e.dset("y")[0] % 1000 == 0
        assert len(pool) <= 4 and _fds() - base <= 4
    assert pool.stats()["peak_open"] == 4 and pool.evictions == 16
    with pool.use(many[0]) as pinned:  # a file in use is never closed under its reader
        for p in many[20:30]:
            with pool.use(p):
                pass
        assert pinned.dset("y")[1] == 1
    with pool.use(many[29]):  # the most recent stays open: no reopen
        pass
    assert pool.opens == 20 + 1 + 10
    pool.close_all()
    assert len(pool) == 0 and _fds() == base  # dropping the identifiers closed every file


def test_bounded_source_reads_every_row_once_per_epoch_on_two_ranks(many: list[str]) -> None:
    pool = OpenFiles(6)
    src = H5Source(many, ["x", "y"], pool=pool)
    assert src.shuffle_cycle == 3 and len(src.blocks) == 180
    seen = []
    for rank in (0, 1):
        ld = ShardedLoader(src, ["x"], "y", batch=16, rank=rank, ranks=2, seed=3, window=4)
        for x, y in ld.batches([0]):
            assert np.array_equal(x[:, 0], y)
            seen.append(y.copy())
    rows = np.concatenate(seen)
    assert sorted(rows.tolist()) == sorted(1000 * k + i for k in range(60) for i in range(30))
    assert pool.peak <= 6
    assert np.array_equal(src.files[7]["y"][:], 7000 + np.arange(30))  # whole columns, lazily
    src.close()


def test_interleaved_order_is_a_permutation_with_at_most_cycle_files_active() -> None:
    files = [f for f in range(50) for _ in range(1 + f % 4)]  # files of 1 to 4 blocks
    a = plan.block_order(len(files), 7, 0, files=files, cycle=5)
    assert sorted(a) == list(range(len(files)))
    assert a == plan.block_order(len(files), 7, 0, files=files, cycle=5)  # reproducible
    assert a != plan.block_order(len(files), 7, 1, files=files, cycle=5)  # per epoch
    first = {f: a.index(next(b for b in a if files[b] == f)) for f in set(files)}
    last = {f: max(i for i, b in enumerate(a) if files[b] == f) for f in set(files)}
    for i in range(len(a)):
        assert sum(first[f] <= i <= last[f] for f in first) <= 5
    # no bound needed (files <= cycle): the plain permutation, as before
    assert plan.block_order(len(files), 7, 0, files=files, cycle=50) == plan.block_order(
        len(files), 7, 0)


def test_window_shuffle_mixes_classes_like_the_full_shuffle() -> None:
    """Files sorted by class (the worst case: 200 files of class 0, then 200 of class 1, 4
    blocks each); shuffle windows of 8 blocks hold both classes about as evenly as with the
    full permutation, with 20 files active at a time."""
    files = [f for f in range(400) for _ in range(4)]
    cls = np.array([f >= 200 for f in files], float)

    def spread(order: list[int]) -> float:
        w = cls[np.array(order)].reshape(-1, 8).mean(1)
        return float(w.std())

    full = np.mean([spread(plan.block_order(len(files), s, 0)) for s in range(5)])
    bound = np.mean([spread(plan.block_order(len(files), s, 0, files=files, cycle=20))
                     for s in range(5)])
    assert abs(full - 0.177) < 0.03  # sqrt(0.25 / 8): independent draws
    assert bound < 1.25 * full


def test_a_file_of_another_shape_is_named(many: list[str], tmp_path: Path) -> None:
    odd = tmp_path / "odd.h5"
    with h5py.File(odd, "w") as f:
        f.create_dataset("x", data=np.zeros((30, 3), np.float32))
        f.create_dataset("y", data=np.zeros(30, np.int64))
    with pytest.raises(InputDataError, match=r"odd\.h5: dataset 'x' is float32\(3,\), but "):
        H5Source([*many[:30], str(odd), *many[30:]], ["x", "y"], pool=OpenFiles(4))


def test_out_of_descriptors_shrinks_the_lru_then_fails_with_the_limit_and_the_fix(
        many: list[str]) -> None:
    script = textwrap.dedent(f"""
        import os, resource, sys
        from payloads.runtime.pipeline.h5source import H5Source, OpenFiles
        from payloads.runtime.errors import PayloadFailure
        paths = {many!r}
        n = len(os.listdir("/proc/self/fd"))
        resource.setrlimit(resource.RLIMIT_NOFILE, (n + 5, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
        pool = OpenFiles(50)  # more than the limit allows: the LRU halves on EMFILE
        src = H5Source(paths, ["x", "y"], pool=pool)
        rows = sum(len(src.read(b)["y"]) for b in src.blocks)
        print("ok", pool.capacity, pool.peak, rows)
        resource.setrlimit(resource.RLIMIT_NOFILE, (n - 1, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
        pool.close_all()
        try:
            H5Source(paths, ["x", "y"], pool=pool)
        except PayloadFailure as e:
            print(e.code, e)
    """)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          env=env, timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    ok, failed = proc.stdout.splitlines()[:2]
    _, capacity, peak, rows = ok.split()
    assert int(capacity) <= 6 and int(peak) <= 6 and int(rows) == 60 * 30
    assert failed.startswith("2 input file ") and "Too many open files" in failed
    assert "ulimit -n" in failed and "data.max_open_files" in failed


def test_default_bound_and_validate_check() -> None:
    assert default_max_open(256) == 128 and default_max_open(200) == 72
    assert default_max_open(1024) == 256 and default_max_open(50) == 8
    assert open_files_problem(10_000, None, 1024) is None
    assert open_files_problem(10_000, 500, 1024) is None
    field, msg = open_files_problem(10_000, 5000, 1024) or ("", "")
    assert field == "max_open_files" and "set it to 960 or less" in msg and "ulimit -n" in msg
    assert open_files_problem(3, 5000, 1024) is None  # only 3 files to hold
    field, msg = open_files_problem(100, None, 40) or ("", "")
    assert field == "train" and "hard limit 40" in msg


def test_data_ls_pages_a_datasets_files(gridml_home: Path, tmp_path: Path) -> None:
    from gridml.data import open_data_manager
    from tests.helpers import gridml

    files = []
    for i in range(3):
        files.append(tmp_path / f"p{i}.h5")
        files[-1].write_bytes(b"x" * (10 + i))
    open_data_manager("local").upload(files, "user.pg:ds")
    doc = json.loads(gridml("data", "ls", "user.pg:ds", "--json", "--limit", "1", "--offset",
                            "1").stdout)
    assert [f["name"] for f in doc["files"]] == ["p1.h5"]
    assert doc["total_files"] == 3 and doc["total_bytes"] == 33 and doc["offset"] == 1
    text = gridml("data", "ls", "user.pg:ds", "--limit", "2").stdout
    assert "p1.h5" in text and "p2.h5" not in text and "--offset 2" in text


def test_validate_refuses_a_bound_the_hosts_limit_cannot_hold(tmp_path: Path) -> None:
    """gridml validate's check (load_spec with the data backend), under a hard limit of 512:
    data.max_open_files 5000 with 10,000 input files is one line naming the field; without
    it the spec passes; the trial document carries the field."""
    (tmp_path / "m.py").write_text("def build_model(hparams, input_shape):\n    return None\n")
    spec = ("name: demo\npayload: {model: m.py, framework: torch}\ndata:\n  train: user.d:t\n"
            "  validation: user.d:v\n  %s\ntraining: {epochs: 1}\nsearch:\n  objective: val_auc\n  direction: maximize\n"
            "  algorithm: random\n  space:\n    lr: {type: real, low: 0.001, high: 0.1}\n")
    (tmp_path / "bad.yaml").write_text(spec % "max_open_files: 5000")
    (tmp_path / "ok.yaml").write_text(spec % "features: x")
    script = textwrap.dedent(f"""
        import resource
        resource.setrlimit(resource.RLIMIT_NOFILE, (512, 512))
        from gridml.errors import SpecError
        from gridml.spec import load_spec

        class Data:
            def exists(self, did): return True
            def list_files(self, did): return [None] * 10_000

        load_spec({str(tmp_path / "ok.yaml")!r}, did_exists=Data().exists)
        try:
            load_spec({str(tmp_path / "bad.yaml")!r}, did_exists=Data().exists)
        except SpecError as e:
            print(e)
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "bad.yaml:6: data.max_open_files: 5000 input files open does not fit" in proc.stdout
    assert "set it to 448 or less" in proc.stdout and "ulimit -n" in proc.stdout
    from gridml.spec import load_spec
    from gridml.planner import trial_document
    from gridml.store.records import Study, Trial

    loaded = load_spec(tmp_path / "bad.yaml")
    doc = trial_document(loaded, Study(1, "demo", {}, "h"), Trial(2, 1, 0, {"lr": 0.01}),
                         train=["a.h5"], validation=["b.h5"], inputs=[],
                         output_dir=str(tmp_path), api=None)
    assert doc.to_json()["data"]["max_open_files"] == 5000


def test_check_pass_over_processes_gives_the_same_source_and_names_a_bad_file(
        many: list[str], tmp_path: Path) -> None:
    from payloads.runtime.pipeline.h5source import scan_workers

    assert scan_workers(100) == 1  # few files: no processes
    one = H5Source(many, ["x", "y"], pool=OpenFiles(6), scan_processes=1)
    two = H5Source(many, ["x", "y"], pool=OpenFiles(6), scan_processes=2)
    assert two.rows == one.rows and two.blocks == one.blocks
    assert two.row_shapes == one.row_shapes and two.dtypes == one.dtypes
    for b in two.blocks[::17]:
        assert np.array_equal(two.read(b)["y"], one.read(b)["y"])
    odd = tmp_path / "odd.h5"
    with h5py.File(odd, "w") as f:
        f.create_dataset("x", data=np.zeros((30, 3), np.float32))
        f.create_dataset("y", data=np.zeros(30, np.int64))
    with pytest.raises(InputDataError, match=r"odd\.h5: dataset 'x' is float32\(3,\)"):
        H5Source([*many[:45], str(odd), *many[45:]], ["x", "y"], pool=OpenFiles(4),
                 scan_processes=2)
    with pytest.raises(InputDataError, match=r"nope\.h5: no such file"):
        H5Source([*many[:10], str(tmp_path / "nope.h5")], ["x", "y"], pool=OpenFiles(4),
                 scan_processes=2)
