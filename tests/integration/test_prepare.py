"""`gridml prepare` on real ROOT files (written by uproot), with a real process pool, the real
local data store and the real CLI: results, caching, determinism, failures, registration."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest
import uproot

from gridml.errors import DataError, SpecError
from gridml.prepare import PrepareError, run_prepare
from gridml.prepare.inputs import hash_file
from tests.helpers import wait_for

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "examples"))
from make_root_ntuples import make_events, write_file  # noqa: E402  (examples/ on the path first)

N_FILES, N_EVENTS, CHUNK = 3, 3000, 1000


def _spec(ws: Path, **changes: str) -> Path:
    text = (ROOT / "examples" / "prep.yaml").read_text()
    text = text.replace("../data/ntuples/*.root", "data/*.root")
    text = text.replace("chunk_size: 50000", f"chunk_size: {CHUNK}")
    text = text.replace("../data/prepared/taus", "out").replace("shard_size: 64MB", "shard_size: 48kB")
    for old, new in changes.items():
        assert old in text, old
        text = text.replace(old, new)
    path = ws / "prep.yaml"
    path.write_text(text)
    return path


@pytest.fixture
def ws(tmp_path: Path, gridml_home: Path) -> Path:
    (tmp_path / "data").mkdir()
    for i in range(N_FILES):
        write_file(tmp_path / "data" / f"ntuple_{i}.root", N_EVENTS, 10 + i, i * N_EVENTS,
                   basket=500)
    shutil.copy(ROOT / "examples" / "preprocess.py", tmp_path / "preprocess.py")
    _spec(tmp_path)
    return tmp_path


def _shards(out: Path, split: str) -> list[Path]:
    return sorted(out.glob(f"{split}-*.h5"))


def _rows(out: Path, split: str) -> np.ndarray:
    """All rows (x with y appended) of a split, sorted, to compare runs."""
    parts = []
    for path in _shards(out, split):
        with h5py.File(path) as fh:
            parts.append(np.column_stack([fh["x"][:], fh["y"][:]]))
    rows = np.concatenate(parts)
    return rows[np.lexsort(rows.T[::-1])]


def _selected_events(ws: Path) -> int:
    total = 0
    for path in sorted((ws / "data").glob("*.root")):
        pt = uproot.open(path)["events"]["jet_pt"].array(library="np")
        total += int((pt > 25.0).sum())
    return total


def test_prepare_writes_shards_and_reruns_from_cache(ws: Path) -> None:
    res = run_prepare(ws / "prep.yaml", jobs=2, show_progress=False)
    out = ws / "out"
    assert (res.chunks, res.chunks_computed, res.events) == (9, 9, 9000)
    manifest = json.loads((out / "manifest.json").read_text())
    assert sum(s["rows"] for s in manifest["splits"].values()) == _selected_events(ws)
    assert len(manifest["columns"]) == 7 + 3 * 8
    for entry in manifest["inputs"]:
        assert (entry["blake2b"], entry["adler32"]) == hash_file(Path(entry["path"]))
    assert len(_shards(out, "train")) > N_FILES  # 48kB shards: several per file
    with h5py.File(_shards(out, "train")[0]) as fh:
        assert fh["x"].dtype == np.float32 and fh["x"].shape[1] == 31
        assert fh["y"].shape == (fh["x"].shape[0],) and fh["x"].compression == "lzf"
        assert list(fh["x"].attrs["columns"])[:3] == ["log_pt", "eta", "mass"]
        assert set(np.unique(fh["y"][:])) == {0.0, 1.0}
    train = _rows(out, "train")
    norm = json.loads((out / "norm.json").read_text())
    np.testing.assert_allclose(norm["mean"], train[:, :-1].mean(axis=0), rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(norm["std"], train[:, :-1].std(axis=0), rtol=1e-3, atol=1e-6)
    fractions = np.array([manifest["splits"][s]["rows"] for s in ("train", "val", "test")])
    np.testing.assert_allclose(fractions / fractions.sum(), [0.8, 0.1, 0.1], atol=0.03)

    # nothing changed: nothing recomputed or rewritten (its time, goal < 1 s, is measured in
    # benchmarks/prepare.py)
    written = {p.name: p.stat().st_mtime_ns for p in out.iterdir() if p.is_file()}
    again = run_prepare(ws / "prep.yaml", jobs=2, show_progress=False)
    assert again.up_to_date and again.chunks_computed == 0 and again.events_computed == 0
    assert again.shards_written == 0
    assert {p.name: p.stat().st_mtime_ns for p in out.iterdir() if p.is_file()} == written

    # every event lands in the same split whatever the chunking and the number of workers
    _spec(ws, **{f"chunk_size: {CHUNK}": "chunk_size: 700", "shard_size: 48kB": "shard_size: 1MB"})
    other = run_prepare(ws / "prep.yaml", jobs=1, show_progress=False)
    assert other.chunks_computed == 15 and len(_shards(out, "train")) == N_FILES
    for split in ("train", "val", "test"):
        np.testing.assert_array_equal(_rows(out, split), train if split == "train" else
                                      _rows(out, split))
    np.testing.assert_array_equal(_rows(out, "train"), train)


def test_a_changed_file_redoes_only_its_chunks(ws: Path) -> None:
    run_prepare(ws / "prep.yaml", jobs=2, show_progress=False)
    out = ws / "out"
    before = {p.name: p.stat().st_mtime_ns for p in out.glob("*.h5")}
    write_file(ws / "data" / "ntuple_1.root", N_EVENTS, 99, N_EVENTS, basket=500)
    os.utime(ws / "data" / "ntuple_2.root")  # touched only: re-hashed, nothing recomputed
    res = run_prepare(ws / "prep.yaml", jobs=2, show_progress=False)
    assert (res.chunks_computed, res.events_computed) == (3, 3000)
    after = {p.name: p.stat().st_mtime_ns for p in out.glob("*.h5")}
    changed = {n for n in after if before.get(n) != after[n]}
    assert changed and all("-ntuple_1-" in n for n in changed)
    assert res.shards_written == len(changed)


def _user_raises_in(ws: Path, event: int) -> None:
    text = (ws / "preprocess.py").read_text().replace(
        "    keep = (events.jet_pt", f"    if {event} in events.event:\n"
        "        raise ValueError('bad event')\n    keep = (events.jet_pt")
    (ws / "preprocess.py").write_text(text)


def test_failures_name_file_chunk_reason_and_leave_nothing(ws: Path) -> None:
    from gridml.data import open_data_manager

    _user_raises_in(ws, N_EVENTS + 1500)  # file 1, chunk 1
    with pytest.raises(PrepareError) as info:
        run_prepare(ws / "prep.yaml", jobs=2, dataset="user.test:taus", show_progress=False)
    msg = str(info.value)
    assert msg.startswith(f"{ws / 'data' / 'ntuple_1.root'}: chunk 1 (events 1000-2000): ")
    line = (ws / "preprocess.py").read_text().splitlines().index(
        "        raise ValueError('bad event')") + 1
    assert f"preprocess.py:{line} in process: ValueError: bad event" in msg
    assert not list((ws / "out").glob("*.h5")) and not (ws / "out" / "manifest.json").exists()
    assert not open_data_manager("local").exists("user.test:taus.train")

    shutil.copy(ROOT / "examples" / "preprocess.py", ws / "preprocess.py")
    (ws / "data" / "ntuple_2.root").write_bytes((ws / "data" / "ntuple_2.root").read_bytes()[:5000])
    with pytest.raises(DataError, match="ntuple_2.root: cannot read as ROOT .* corrupt or truncated"):
        run_prepare(ws / "prep.yaml", jobs=2, show_progress=False)


def test_corrupt_basket_is_caught_in_its_chunk(ws: Path) -> None:
    path = ws / "data" / "ntuple_0.root"
    raw = bytearray(path.read_bytes())
    basket = uproot.open(path)["events"]["trk_pt"]
    start = int(basket.member("fBasketSeek")[3])  # the basket of entries 1500-2000
    raw[start:start + 40] = bytes(40)  # its key (header) zeroed
    path.write_bytes(bytes(raw))
    with pytest.raises(PrepareError, match="ntuple_0.root: chunk 1 \\(events 1000-2000\\): cannot "
                                           "read events .* corrupt or truncated"):
        run_prepare(ws / "prep.yaml", jobs=1, show_progress=False)


def test_schema_mismatch_between_files(ws: Path) -> None:
    import uproot as up

    events = make_events(100, np.random.default_rng(3))
    events.pop("jet_mass")
    with up.recreate(ws / "data" / "ntuple_9.root") as fh:
        fh.mktree("events", events)
    with pytest.raises(SpecError) as info:
        run_prepare(ws / "prep.yaml", jobs=1, show_progress=False)
    assert info.value.problems == [(
        f"{ws / 'data' / 'ntuple_9.root'}: schema mismatch: column 'jet_mass' missing (present in "
        f"{ws / 'data' / 'ntuple_0.root'}); fix the file or drop it from inputs.branches")]


def test_register_as_datasets_in_the_local_store(ws: Path) -> None:
    from gridml.data import open_data_manager

    res = run_prepare(ws / "prep.yaml", jobs=2, dataset="user.test:taus", show_progress=False)
    assert res.datasets == {s: f"user.test:taus.{s}" for s in ("train", "val", "test", "meta")}
    store = open_data_manager("local")
    shards = {p.name: hash_file(p)[1] for p in (ws / "out").glob("train-*.h5")}
    files = store.resolve("user.test:taus.train")
    assert {(f.did.name, f.adler32) for f in files} == {(f"taus.{n}", a) for n, a in shards.items()}
    with h5py.File(files[0].path) as fh:
        assert fh["x"].shape[1] == 31
    assert len(store.list_files("user.test:taus.meta")) == 2
    assert run_prepare(ws / "prep.yaml", dataset="user.test:taus", show_progress=False).up_to_date
    write_file(ws / "data" / "ntuple_0.root", N_EVENTS, 77, 0, basket=500)
    with pytest.raises(DataError, match="user.test:taus.train already exists with different files"):
        run_prepare(ws / "prep.yaml", jobs=2, dataset="user.test:taus", show_progress=False)


def test_dids_as_inputs_hdf5_and_ragged(ws: Path) -> None:
    """HDF5 inputs from a dataset DID; a variable-length output kept ragged."""
    from gridml.data import open_data_manager

    rng = np.random.default_rng(5)
    h5 = ws / "cols.h5"
    with h5py.File(h5, "w") as fh:
        fh["a"] = rng.normal(size=500).astype(np.float32)
        fh["n"] = rng.integers(0, 4, 500).astype(np.int32)
        fh["label"] = rng.integers(0, 2, 500).astype(np.int32)
    open_data_manager("local").upload([h5], "user.test:cols")
    (ws / "cols.py").write_text(
        "import awkward as ak\n\n"
        "def process(events, params):\n"
        "    hits = ak.unflatten(ak.flatten(ak.local_index(ak.unflatten(events.a.to_numpy().repeat("
        "events.n.to_numpy()), events.n.to_numpy()))) * 1.0, events.n.to_numpy())\n"
        "    return {'x': {'a': events.a, 'hits': hits}, 'y': events.label}\n")
    spec = ws / "cols.yaml"
    spec.write_text("name: cols\ninputs: {dids: ['user.test:cols'], tree: /, chunk_size: 200}\n"
                    "preprocess: {module: cols.py}\nfeatures: {ragged: [hits]}\n"
                    "split: {fractions: {train: 1.0}}\noutput: {dir: cols-out}\n")
    res = run_prepare(spec, jobs=2, show_progress=False)
    assert res.manifest["columns"] == ["a"] and res.manifest["ragged"] == ["hits"]
    with h5py.File(_shards(ws / "cols-out", "train")[0]) as fh:
        lengths, values = fh["hits_lengths"][:], fh["hits_values"][:]
        assert len(lengths) == len(fh["x"]) == 500 and lengths.sum() == len(values)
        offsets = np.concatenate([[0], np.cumsum(lengths)])
        assert all((values[offsets[i]:offsets[i + 1]] == np.arange(lengths[i])).all()
                   for i in range(500))


def test_cli_json_and_spec_errors(ws: Path) -> None:
    gridml = [str(Path(sys.executable).parent / "gridml"), "prepare"]
    proc = subprocess.run([*gridml, str(ws / "prep.yaml"), "-j", "1", "--json"],
                          capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    assert summary["chunks_computed"] == 9 and summary["features"] == 31
    assert set(summary["splits"]) == {"train", "val", "test"}
    _spec(ws, **{"tree: events": "tree: events\n  colour: blue"})
    bad = subprocess.run([*gridml, str(ws / "prep.yaml")], capture_output=True, text=True,
                         timeout=300, check=False)
    assert bad.returncode == 2
    lines = (ws / "prep.yaml").read_text().splitlines()
    line = next(i for i, text in enumerate(lines, 1) if text.startswith("  colour: blue"))
    said = "".join((bad.stdout + bad.stderr).split())  # the CLI may wrap long lines
    assert f"{ws / 'prep.yaml'}:{line}:inputs.colour:unknownkey" in said
    assert "Traceback" not in bad.stdout + bad.stderr


def test_normalize_apply_and_output_settings_reuse_pieces(ws: Path) -> None:
    first = run_prepare(ws / "prep.yaml", jobs=1, show_progress=False)
    _spec(ws, **{"normalize: store": "normalize: apply", "compression: lzf": "compression: gzip"})
    res = run_prepare(ws / "prep.yaml", jobs=1, show_progress=False)
    assert res.chunks_computed == 0 and res.shards_written == len(first.manifest["shards"])
    train = _rows(ws / "out", "train")[:, :-1]
    varying = train.std(axis=0) > 0
    np.testing.assert_allclose(train.mean(axis=0), 0, atol=1e-4)
    np.testing.assert_allclose(train.std(axis=0)[varying], 1, rtol=1e-3)
    with h5py.File(_shards(ws / "out", "val")[0]) as fh:
        assert fh.attrs["normalized"] and fh["x"].compression == "gzip"
        np.testing.assert_allclose(fh.attrs["norm_mean"], res.manifest["norm"]["mean"], rtol=1e-6)


def test_one_run_per_output_folder(ws: Path) -> None:
    import fcntl

    from gridml.errors import UsageError

    (ws / "out").mkdir()
    with open(ws / "out" / ".lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        with pytest.raises(UsageError, match="another `gridml prepare` is writing to"):
            run_prepare(ws / "prep.yaml", jobs=1, show_progress=False)
    assert run_prepare(ws / "prep.yaml", jobs=1, show_progress=False).chunks_computed == 9


def test_a_changed_function_redoes_every_chunk_in_process(ws: Path) -> None:
    run_prepare(ws / "prep.yaml", jobs=1, show_progress=False)
    module = ws / "preprocess.py"
    module.write_text(module.read_text().replace('"eta": ev.jet_eta', '"eta": abs(ev.jet_eta)'))
    res = run_prepare(ws / "prep.yaml", jobs=1, show_progress=False)
    assert res.chunks_computed == 9 and res.shards_written == len(res.manifest["shards"])
    assert (_rows(ws / "out", "train")[:, 1] >= 0).all()


def test_a_worker_killed_mid_chunk_is_named(ws: Path) -> None:
    text = (ws / "preprocess.py").read_text().replace(
        "    keep = (events.jet_pt", f"    if {2 * N_EVENTS + 10} in events.event:\n"
        "        import os, signal\n        os.kill(os.getpid(), signal.SIGKILL)\n"
        "    keep = (events.jet_pt")
    (ws / "preprocess.py").write_text(text)
    with pytest.raises(DataError) as info:
        run_prepare(ws / "prep.yaml", jobs=2, show_progress=False)
    assert str(info.value).startswith("a worker process died while working on ")
    assert f"{ws / 'data' / 'ntuple_2.root'}: chunk 0 (events 0-1000)" in str(info.value)
    assert not list((ws / "out").glob("*.h5"))


def test_no_orphan_workers_when_the_parent_is_killed(ws: Path) -> None:
    import signal

    (ws / "slow.py").write_text("import time\n\ndef process(events, params):\n"
                                "    time.sleep(60)\n")
    _spec(ws, **{"module: preprocess.py": "module: slow.py"})
    gridml = str(Path(sys.executable).parent / "gridml")
    proc = subprocess.Popen([gridml, "prepare", str(ws / "prep.yaml"), "-j", "2", "-q"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        def children() -> list[str]:
            return Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()

        wait_for(lambda: len(children()) >= 2, 60, "2 worker processes", interval=0.2)
        workers = children()
        assert len(workers) == 2
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()

    def alive() -> list[str]:
        out = []
        for w in workers:
            try:
                if "Z" not in Path(f"/proc/{w}/stat").read_text().split()[2]:
                    out.append(w)
            except OSError:  # gone
                pass
        return out

    wait_for(lambda: not alive(), 10, lambda: f"the workers to exit with their parent: {alive()} live")


def test_a_split_key_must_be_one_integer_per_event(ws: Path) -> None:
    _spec(ws, **{"key: [run, event]": "key: [run, jet_pt]"})
    with pytest.raises(PrepareError, match="split.key column 'jet_pt' must hold one integer"):
        run_prepare(ws / "prep.yaml", jobs=1, show_progress=False)
