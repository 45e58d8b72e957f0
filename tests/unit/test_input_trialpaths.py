"""trial.json's input paths are resolved as ``Path.resolve`` does, in about one ``lstat`` a file
(payloads/runtime/trial.py ``resolve_paths``; issue 28: 12,000 files took ~1 s of the start)."""

from __future__ import annotations

import os
from pathlib import Path

from payloads.runtime import trial
from payloads.runtime.trial import resolve_paths


def test_resolve_paths_matches_path_resolve_with_few_syscalls(tmp_path: Path, monkeypatch) -> None:
    store = tmp_path / "store"
    for i in range(40):  # hashed folders, as the local store's: a folder or two per file
        d = store / f"{i % 7:02d}" / f"{i:02d}"
        d.mkdir(parents=True)
        (d / f"f{i}.h5").write_bytes(b"x")
    (tmp_path / "linked").symlink_to(store)  # a folder that is a symlink
    (tmp_path / "one.h5").symlink_to(store / "03" / "03" / "f3.h5")  # a file that is one
    base = tmp_path / "study" / "trial-0000"
    base.mkdir(parents=True)
    paths = ([str(p) for p in sorted(store.rglob("*.h5"))]
             + [f"../../linked/{i % 7:02d}/{i:02d}/f{i}.h5" for i in range(40)]
             + [str(tmp_path / "one.h5"), "missing.h5", str(tmp_path / "gone" / "x.h5"),
                "../trial-0000/./../../store/01/01/f1.h5", ".", ".."])
    calls: list[str] = []
    real_lstat = os.lstat
    monkeypatch.setattr(trial.os, "lstat", lambda p, *a, **k: calls.append(p) or real_lstat(p))
    want = tuple(str((base / p).resolve()) for p in paths)
    before, calls[:] = len(calls), []
    got = resolve_paths(base, paths)
    assert got == want
    assert got[-6] == str(store / "03" / "03" / "f3.h5")  # the file symlink, followed
    # Path.resolve: an lstat per component of every path; here each folder once, each file once
    assert len(calls) < before / 2, (len(calls), before)
    assert len(calls) < 4 * len(paths), len(calls)
