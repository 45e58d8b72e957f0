"""`gridml prepare` on real collision data nobody here wrote: the H->ZZ, Z->mumu and quark/gluon
dijet ROOT files that scikit-hep-testdata 0.2.0 ships inside its package (requirements/extras.txt
says why it is pinned). Muon and track collections with several features, padded and ragged;
two samples as labels with their own schemas and weights. Every expectation is computed here
from the files, read directly with uproot; nothing is hard-coded."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import awkward as ak
import h5py
import numpy as np
import pytest
import uproot

from gridml.data import open_data_manager
from gridml.prepare import run_prepare
from gridml.prepare.cli import render, summarize

skhep_testdata = pytest.importorskip("skhep_testdata", reason="pip install scikit-hep-testdata==0.2.0")
DATA = Path(skhep_testdata.__file__).parent / "data"
HZZ, ZMUMU, DIJETS = DATA / "uproot-HZZ.root", DATA / "uproot-Zmumu.root", DATA / "uproot-issue96.root"
MUON = ["Muon_Px", "Muon_Py", "Muon_Pz", "Muon_E", "Muon_Charge"]
L_MU = 2
XSEC, LUMI, ZSCALE = 0.05, 140_000.0, 0.5

# H->ZZ has jagged Muon_* branches; the Z->mumu file is flat (px1, px2, ...): the function, told
# which sample it reads, builds the same collection from the two muons there.
PHYSICS = '''\
import awkward as ak
import numpy as np


def process(events, params, sample=None):
    if sample == "zmumu":
        two = lambda a, b: ak.concatenate([events[a][:, None], events[b][:, None]], axis=1)
        muons = {"Muon_Px": two("px1", "px2"), "Muon_Py": two("py1", "py2"),
                 "Muon_Pz": two("pz1", "pz2"), "Muon_E": two("E1", "E2"),
                 "Muon_Charge": two("Q1", "Q2")}
    else:
        muons = {}  # read from the file's own Muon_* branches
    n = ak.num(muons["Muon_E"]) if muons else events.NMuon
    keep = np.asarray(n >= params["min_muons"])
    entry = np.arange(len(events))  # one chunk per file here: the entry in the file
    return {"selected": keep,
            "x": {"entry": entry[keep], "n_mu": np.asarray(n)[keep]},
            "collections": {"muons": {k: v[keep] for k, v in muons.items()},
                            "muons_all": {k: v[keep] for k, v in muons.items()}}}
'''

SPEC = f"""\
name: hzz-vs-zmumu
classes: [background, signal]
samples:
  hzz:
    files: [{HZZ}]
    label: signal
    xsec: {XSEC}
    lumi: {LUMI}
    weight_branch: EventWeight
  zmumu:
    files: [{ZMUMU}]
    label: background
    scale: {ZSCALE}
preprocess:
  module: physics.py
  params: {{min_muons: 1}}
collections:
  muons: {{branches: {MUON}, sort_by: Muon_E, max_length: {L_MU}, layout: padded}}
  muons_all: {{branches: {MUON}, sort_by: Muon_E, layout: ragged}}
split:
  fractions: {{train: 0.5, val: 0.25, test: 0.25}}
output:
  dir: out
  shard_size: 64kB
"""


def _write(ws: Path, name: str, text: str) -> Path:
    path = ws / name
    path.write_text(textwrap.dedent(text))
    return path


def _expected_muons(sample: str) -> dict[str, Any]:
    """Per selected event, read with uproot: the muons' features sorted by energy (descending)."""
    if sample == "hzz":
        ev = uproot.open(HZZ)["events"].arrays([*MUON, "EventWeight"], library="ak")
        cols = [ak.to_list(ev[b]) for b in MUON]
        weight = ak.to_numpy(ev.EventWeight).astype(np.float64)
    else:
        ev = uproot.open(ZMUMU)["events"].arrays(library="np")
        pairs = [("px1", "px2"), ("py1", "py2"), ("pz1", "pz2"), ("E1", "E2"), ("Q1", "Q2")]
        cols = [[[a, b] for a, b in zip(ev[p], ev[q])] for p, q in pairs]
        weight = np.ones(len(ev["E1"]))
    muons = []
    for objs in zip(*cols):
        table = np.array(objs, dtype=np.float64).T.reshape(-1, len(MUON))  # (n_mu, C)
        order = np.argsort(-table[:, MUON.index("Muon_E")], kind="stable")
        muons.append(table[order])
    keep = np.array([len(m) >= 1 for m in muons])
    return {"entries": np.flatnonzero(keep), "muons": [m for m, k in zip(muons, keep) if k],
            "weight": weight, "all_events": len(muons)}


def _read(out: Path, sample: str) -> dict[str, np.ndarray]:
    """Every row of ``sample``, from all its shards and splits, ordered by the file entry."""
    parts: dict[str, list[np.ndarray]] = {}
    for path in sorted(out.glob("*.h5")):
        with h5py.File(path) as fh:
            if fh.attrs["sample"] != sample:
                continue
            lengths = fh["muons_all_lengths"][:]
            offsets = np.concatenate([[0], np.cumsum(lengths)])
            values = fh["muons_all_values"][:]
            rag = np.empty(len(lengths), dtype=object)
            rag[:] = [values[a:b] for a, b in zip(offsets[:-1], offsets[1:])]
            for key, arr in {"x": fh["x"][:], "y": fh["y"][:], "w": fh["w"][:],
                             "muons": fh["muons"][:], "mask": fh["muons_mask"][:],
                             "lengths": fh["muons_lengths"][:], "ragged": rag,
                             "split": np.full(len(lengths), fh.attrs["split"])}.items():
                parts.setdefault(key, []).append(arr)
    rows = {k: np.concatenate(v) for k, v in parts.items()}
    order = np.argsort(rows["x"][:, 0], kind="stable")
    return {k: v[order] for k, v in rows.items()}


@pytest.fixture
def ws(tmp_path: Path, gridml_home: Path) -> Path:
    _write(tmp_path, "physics.py", PHYSICS)
    _write(tmp_path, "prep.yaml", SPEC)
    return tmp_path


def test_two_samples_with_muon_collections_labels_and_weights(ws: Path) -> None:
    res = run_prepare(ws / "prep.yaml", jobs=2, show_progress=False, dataset="user.test:hzz")
    out = ws / "out"
    manifest = res.manifest
    assert manifest["classes"] == ["background", "signal"]
    assert manifest["collections"]["muons"] == {
        "layout": "padded", "columns": MUON, "sort_by": "Muon_E", "max_length": L_MU,
        "pad_value": 0.0}
    assert manifest["collections"]["muons_all"]["layout"] == "ragged"
    assert manifest["columns"] == ["entry", "n_mu"]
    assert {s["sample"] for s in manifest["shards"]} == {"hzz", "zmumu"}
    summary = summarize(res)  # what `gridml prepare --json` prints, and its human form
    assert summary["collections"]["muons"]["columns"] == MUON
    assert summary["samples"]["hzz"]["label"] == 1
    assert "collection muons: padded to 2" in render(summary)
    truncated = 0
    for sample, label in (("hzz", 1), ("zmumu", 0)):
        exp = _expected_muons(sample)
        got = _read(out, sample)
        n = len(exp["entries"])
        # every selected event exactly once, over all splits; the selection was applied
        np.testing.assert_array_equal(got["x"][:, 0], exp["entries"])
        np.testing.assert_array_equal(got["x"][:, 1], [len(m) for m in exp["muons"]])
        assert manifest["samples"][sample]["events"] == exp["all_events"]
        assert sum(manifest["samples"][sample]["rows"].values()) == n
        assert set(got["split"]) == {"train", "val", "test"}
        # labels from the class names
        np.testing.assert_array_equal(got["y"], np.full(n, label))
        # padded collection: (N, L, C), sorted by energy, truncated at L, padded with 0, masked
        assert got["muons"].shape == (n, L_MU, len(MUON)) and got["muons"].dtype == np.float32
        assert got["mask"].shape == (n, L_MU) and got["mask"].dtype == np.uint8
        for i, muons in enumerate(exp["muons"]):
            k = min(len(muons), L_MU)
            truncated += len(muons) > L_MU
            np.testing.assert_allclose(got["muons"][i, :k], muons[:k], rtol=1e-6)
            assert not got["muons"][i, k:].any()
            np.testing.assert_array_equal(got["mask"][i], np.arange(L_MU) < k)
            assert got["lengths"][i] == k
            assert np.all(np.diff(got["muons"][i, :k, MUON.index("Muon_E")]) <= 0)
            # ragged collection: every muon, same order, (n_mu, C) per event
            np.testing.assert_allclose(got["ragged"][i], muons.astype(np.float32), rtol=1e-6)
        # weights: EventWeight * xsec * lumi / sum of EventWeight over ALL events (before the
        # selection) for H->ZZ; the constant scale for Z->mumu
        if sample == "hzz":
            factor = XSEC * LUMI / exp["weight"].sum()
            want = exp["weight"][exp["entries"]] * factor
        else:
            factor, want = ZSCALE, np.full(n, ZSCALE)
        np.testing.assert_allclose(got["w"], want, rtol=1e-5)
        assert manifest["samples"][sample]["weight_scale"] == pytest.approx(factor)
    assert truncated > 0  # H->ZZ has events with more than L muons: truncation was exercised

    with h5py.File(sorted(out.glob("train-hzz.*.h5"))[0]) as fh:
        assert list(fh["muons"].attrs["columns"]) == MUON
        assert fh["muons"].attrs["layout"] == "padded" and fh["muons"].attrs["max_length"] == L_MU
        assert list(fh["muons_all_values"].attrs["columns"]) == MUON
        assert json.loads(fh.attrs["collections"])["muons"]["columns"] == MUON
        assert json.loads(fh.attrs["classes"]) == ["background", "signal"]
        assert fh.attrs["label"] == 1 and fh.attrs["sample"] == "hzz"

    # norm.json: channel means over the real (unpadded) muons of the train split
    norm = json.loads((out / "norm.json").read_text())["collections"]["muons"]
    train = [_read(out, s) for s in ("hzz", "zmumu")]
    real = np.concatenate([r["muons"][(r["split"] == "train")][r["mask"][r["split"] == "train"]
                                                               .astype(bool)] for r in train])
    assert norm["columns"] == MUON and norm["count"] == len(real)
    np.testing.assert_allclose(norm["mean"], real.mean(axis=0, dtype=np.float64), rtol=1e-4)

    # the catalog names the channels too
    files = open_data_manager("local").list_files("user.test:hzz.train")
    meta = files[0].metadata
    assert json.loads(meta["collections"])["muons"]["columns"] == MUON
    assert json.loads(meta["classes"]) == ["background", "signal"]

    # a new cross-section: the cached chunks are reused, only the shards are rewritten
    _write(ws, "prep.yaml", SPEC.replace(f"xsec: {XSEC}", f"xsec: {2 * XSEC}"))
    again = run_prepare(ws / "prep.yaml", jobs=1, show_progress=False)
    assert again.chunks_computed == 0 and again.shards_written > 0
    hzz = _read(out, "hzz")
    exp = _expected_muons("hzz")
    np.testing.assert_allclose(hzz["w"], exp["weight"][exp["entries"]] * 2 * XSEC * LUMI
                               / exp["weight"].sum(), rtol=1e-5)


# The quark/gluon dijet file: jet1ID 21 is a gluon, 1-6 a quark; the tracks of the leading jet
# are TLorentzVectors (the function turns them into pt, eta, phi) and jet1TrksChg is read as is.
QG = '''\
import awkward as ak
import numpy as np


def process(events, params):
    p = events.jet1TrksP4.fP
    pt = np.hypot(p.fX, p.fY)
    number = np.asarray(events.EventNumber)  # exact in float32 as two halves
    return {"x": {"ev_hi": number // 4096, "ev_lo": number % 4096},
            "y": np.asarray(events.jet1ID == 21, dtype=np.float32),   # gluon = 1, quark = 0
            "collections": {"tracks": {"trk_pt": pt, "trk_eta": np.arcsinh(p.fZ / pt),
                                       "trk_phi": np.arctan2(p.fY, p.fX)}}}
'''
TRACKS = ["trk_pt", "trk_eta", "trk_phi", "jet1TrksChg"]
L_TRK = 4  # the file keeps at most 6 tracks per jet: most jets are truncated


def _expected_tracks() -> tuple[Any, np.ndarray, np.ndarray, np.ndarray]:
    """(tracks sorted by pt, descending: (N, var, C) awkward, event numbers, labels, ChgMult)."""
    ev = uproot.open(DIJETS)["tree"].arrays(["EventNumber", "jet1ID", "jet1TrksP4",
                                             "jet1TrksChg", "jet1ChgMult"], library="ak")
    p = ev.jet1TrksP4.fP
    pt = np.hypot(p.fX, p.fY)
    channels = [pt, np.arcsinh(p.fZ / pt), np.arctan2(p.fY, p.fX), ev.jet1TrksChg]
    order = ak.argsort(-pt, axis=1, stable=True)
    tracks = ak.concatenate([c[order][:, :, None] for c in channels], axis=2)
    return (tracks, ak.to_numpy(ev.EventNumber), ak.to_numpy(ev.jet1ID == 21).astype(float),
            ak.to_numpy(ev.jet1ChgMult))


@pytest.mark.parametrize("layout", ["padded", "ragged"])
def test_quark_gluon_tracks(tmp_path: Path, gridml_home: Path, layout: str) -> None:
    _write(tmp_path, "qg.py", QG)
    length = f"max_length: {L_TRK}, " if layout == "padded" else ""
    _write(tmp_path, "qg.yaml", f"""\
        name: quark-gluon
        inputs:
          files: [{DIJETS}]
          tree: tree
          chunk_size: 5000
        preprocess:
          module: qg.py
        features:
          branches: [jet1ChgMult]
        collections:
          tracks: {{branches: {TRACKS}, sort_by: trk_pt, {length}layout: {layout}}}
        split:
          fractions: {{train: 0.8, val: 0.2}}
          key: [EventNumber]
        output:
          dir: out
        """)
    res = run_prepare(tmp_path / "qg.yaml", jobs=2, show_progress=False)
    assert res.chunks == 3  # 13607 events in chunks of 5000
    tracks, numbers, gluon, mult = _expected_tracks()
    parts: dict[str, list[np.ndarray]] = {}
    for path in sorted((tmp_path / "out").glob("*.h5")):
        with h5py.File(path) as fh:
            assert list(fh["x"].attrs["columns"]) == ["jet1ChgMult", "ev_hi", "ev_lo"]
            assert "w" not in fh  # no samples and no weights asked for: as before
            name = "tracks" if layout == "padded" else "tracks_values"
            assert list(fh[name].attrs["columns"]) == TRACKS
            assert fh[name].attrs["layout"] == layout
            for key in ("x", "y", "tracks_lengths", name, *(["tracks_mask"] if layout == "padded"
                                                           else [])):
                parts.setdefault(key, []).append(fh[key][:])
    got = {k: np.concatenate(v) for k, v in parts.items()}
    x = got["x"].astype(np.int64)
    sorter = np.argsort(numbers)
    idx = sorter[np.searchsorted(numbers, x[:, 1] * 4096 + x[:, 2], sorter=sorter)]
    np.testing.assert_array_equal(numbers[idx], x[:, 1] * 4096 + x[:, 2])
    assert sorted(idx.tolist()) == list(range(len(numbers)))  # every event once
    np.testing.assert_array_equal(x[:, 0], mult[idx])
    np.testing.assert_array_equal(got["y"], gluon[idx])
    counts = ak.to_numpy(ak.num(tracks, axis=1))[idx]
    if layout == "padded":
        want = ak.to_numpy(ak.fill_none(ak.pad_none(tracks[idx], L_TRK, axis=1, clip=True), 0.0))
        assert got["tracks"].shape == (len(idx), L_TRK, len(TRACKS))
        np.testing.assert_allclose(got["tracks"], want, rtol=1e-5, atol=1e-6)
        k = np.minimum(counts, L_TRK)
        np.testing.assert_array_equal(got["tracks_lengths"], k)
        np.testing.assert_array_equal(got["tracks_mask"], np.arange(L_TRK)[None, :] < k[:, None])
        assert (counts > L_TRK).sum() > 1000  # truncation exercised
        pt = got["tracks"][..., 0]
        assert np.all(np.diff(pt, axis=1)[got["tracks_mask"][:, 1:].astype(bool)] <= 0)
    else:
        np.testing.assert_array_equal(got["tracks_lengths"], counts)
        want = ak.to_numpy(ak.flatten(tracks[idx], axis=1))
        np.testing.assert_allclose(got["tracks_values"], want, rtol=1e-5, atol=1e-6)


def test_no_function_needed(tmp_path: Path, gridml_home: Path) -> None:
    """A labelled sample, event branches and a collection: a spec alone, no Python written
    (a Drell-Yan NanoAOD-like file: Muon_pt, Muon_charge jagged, MET_pt per event)."""
    dy = DATA / "uproot-small-dy-withoffsets.root"
    _write(tmp_path, "dy.yaml", f"""\
        name: dy
        inputs: {{tree: tree, branches: [event]}}
        samples:
          dy: {{files: [{dy}], label: 3, scale: 2.5}}
        features: {{branches: [MET_pt]}}
        collections:
          muons: {{branches: [Muon_pt, Muon_charge], sort_by: Muon_pt, max_length: 2}}
        split: {{fractions: {{train: 1.0}}, key: [event]}}
        output: {{dir: out}}
        """)
    res = run_prepare(tmp_path / "dy.yaml", jobs=1, show_progress=False)
    assert res.manifest["module"] is None and res.manifest["columns"] == ["MET_pt"]
    ev = uproot.open(dy)["tree"].arrays(["MET_pt", "Muon_pt", "Muon_charge"], library="np")
    (shard,) = sorted((tmp_path / "out").glob("*.h5"))
    with h5py.File(shard) as fh:
        np.testing.assert_array_equal(fh["x"][:, 0], ev["MET_pt"])  # one shard, file order
        np.testing.assert_array_equal(fh["y"][:], np.full(len(ev["MET_pt"]), 3.0))
        np.testing.assert_array_equal(fh["w"][:], np.full(len(ev["MET_pt"]), 2.5))
        muons, mask = fh["muons"][:], fh["muons_mask"][:]
    for i, (pt, q) in enumerate(zip(ev["Muon_pt"], ev["Muon_charge"])):
        order = np.argsort(-pt, kind="stable")[:2]
        np.testing.assert_array_equal(muons[i, : len(order)], np.stack([pt[order], q[order]], 1))
        assert mask[i].sum() == len(order) and not muons[i, len(order):].any()
