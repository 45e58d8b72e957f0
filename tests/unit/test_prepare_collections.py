"""Collections (per-object branches -> one (N, L, C) padded or (N, var, C) ragged array), samples
(labels, weights, the sample's name passed to the function) and their spec syntax."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import awkward as ak
import numpy as np
import pytest

from gridml.errors import DataError, SpecError
from gridml.prepare import shards, transform
from gridml.prepare.spec import load_prep_spec
from gridml.prepare.transform import ChunkProblem

EVENTS = ak.Array({
    "pt": [[1.0, 5.0, 3.0], [2.0], [], [4.0, 9.0, 7.0, 8.0]],
    "eta": [[0.1, 0.5, 0.3], [0.2], [], [0.4, 0.9, 0.7, 0.8]],
    "q": [[1, -1, 1], [-1], [], [1, 1, -1, -1]],
    "met": [10.0, 20.0, 30.0, 40.0],
    "gw": [1.0, -0.5, 2.0, 1.5],
    "odd": [[1.0], [2.0], [], [4.0, 9.0, 7.0, 8.0]],
})
PADDED = {"branches": ["pt", "eta", "q"], "sort_by": "pt", "max_length": 2, "layout": "padded",
          "pad_value": 0.0}
RAGGED = {**PADDED, "layout": "ragged", "max_length": None}


def _rows(out: dict[str, Any] | None = None, **kw: Any) -> transform.Rows:
    return transform.to_rows(out or {"x": {}}, len(EVENTS), {}, [], events=EVENTS, **kw)


def test_padded_collection_sorted_truncated_masked() -> None:
    rows = _rows(label=1, collections={"trk": PADDED})
    c = rows.collections["trk"]
    assert c[""].shape == (4, 2, 3) and c[""].dtype == np.float32
    np.testing.assert_allclose(c[""][0], [[5.0, 0.5, -1], [3.0, 0.3, 1]])  # sorted by pt, cut
    np.testing.assert_allclose(c[""][1], [[2.0, 0.2, -1], [0, 0, 0]])  # padded with 0
    np.testing.assert_allclose(c[""][2], np.zeros((2, 3)))
    np.testing.assert_allclose(c[""][3], [[9.0, 0.9, 1], [8.0, 0.8, -1]])
    np.testing.assert_array_equal(c["mask"], [[1, 1], [1, 0], [0, 0], [1, 1]])
    assert c["mask"].dtype == np.uint8
    np.testing.assert_array_equal(c["lengths"], [2, 1, 0, 2])
    np.testing.assert_array_equal(rows.y, [1, 1, 1, 1])
    assert rows.x.shape == (4, 0) and rows.w is None


def test_ragged_collection_values_with_a_channel_axis() -> None:
    rows = _rows(label=0, collections={"trk": RAGGED})
    c = rows.collections["trk"]
    np.testing.assert_array_equal(c["lengths"], [3, 1, 0, 4])
    assert c["values"].shape == (8, 3)
    np.testing.assert_array_equal(c["values"][:, 0], [5, 3, 1, 2, 9, 8, 7, 4])  # descending per event
    np.testing.assert_array_equal(c["values"][:, 2], [-1, 1, 1, -1, 1, -1, -1, 1])
    cut = _rows(label=0, collections={"trk": {**RAGGED, "max_length": 1}}).collections["trk"]
    np.testing.assert_array_equal(cut["lengths"], [1, 1, 0, 1])
    np.testing.assert_array_equal(cut["values"][:, 0], [5, 2, 9])


def test_unsorted_collection_keeps_file_order() -> None:
    c = _rows(label=0, collections={"trk": {**PADDED, "sort_by": None}}).collections["trk"]
    np.testing.assert_array_equal(c[""][3, :, 0], [4.0, 9.0])


def test_collection_follows_the_selection() -> None:
    out = {"x": {"m": np.array([1.0, 2.0])}, "y": np.array([0, 1]),
           "selected": np.array([False, True, False, True])}
    rows = _rows(out, collections={"trk": PADDED})
    np.testing.assert_array_equal(rows.collections["trk"][""][:, 0, 0], [2.0, 9.0])
    np.testing.assert_array_equal(rows.index, [1, 3])


def test_branches_label_and_weights() -> None:
    sel = {"x": {"two": np.array([2.0, 2.0])}, "selected": np.array([True, False, False, True]),
           "w": np.array([3.0, 0.5])}
    rows = _rows(sel, label=2, weights=True, weight_branch="gw", branches=["met"])
    assert rows.columns == ["met", "two"]
    np.testing.assert_allclose(rows.x, [[10, 2], [40, 2]])
    np.testing.assert_array_equal(rows.y, [2, 2])
    np.testing.assert_allclose(rows.w, [3.0 * 1.0, 0.5 * 1.5])
    assert rows.sumw == pytest.approx(4.0)  # every event of the chunk, before the selection
    plain = _rows(label=0, weights=True)
    np.testing.assert_array_equal(plain.w, np.ones(4))
    assert plain.sumw == 4.0


@pytest.mark.parametrize("kw, says", [
    ({"collections": {"trk": {**PADDED, "branches": ["pt", "odd"]}}},
     "branches 'pt' and 'odd' have different numbers of objects in 1 of 4 events"),
    ({"collections": {"trk": {**PADDED, "branches": ["met"]}}}, "not one list of numbers"),
    ({"collections": {"trk": {**PADDED, "branches": ["nope"]}}}, "branch 'nope' not in the input"),
    ({"branches": ["pt"]}, "'pt' holds a list per event; put it in a collection"),
    ({"weight_branch": "pt"}, "weight_branch 'pt' must hold one number per event"),
])
def test_bad_collections_are_explained(kw: dict[str, Any], says: str) -> None:
    with pytest.raises(ChunkProblem) as info:
        _rows(label=0, **kw)
    assert says in str(info.value)


def test_with_a_label_x_and_y_may_be_left_out() -> None:
    rows = _rows({"collections": {}}, label=1, collections={"trk": PADDED})
    assert rows.x.shape == (4, 0) and rows.collections["trk"][""].shape == (4, 2, 3)
    with pytest.raises(ChunkProblem, match="must return a dict with keys x and y"):
        _rows({"collections": {}})  # no label: y (and x) are needed, as before


def test_label_and_returned_y_conflict() -> None:
    with pytest.raises(ChunkProblem, match="returned y, but the sample has a label"):
        _rows({"x": {}, "y": np.zeros(4)}, label=1)


def test_the_sample_name_reaches_functions_that_take_it() -> None:
    def old(events: Any, params: dict) -> str:
        return "old"

    def new(events: Any, params: dict, sample: str = "") -> str:
        return sample

    def kwargs(events: Any, params: dict, **kw: Any) -> str:
        return kw["sample"]

    assert transform.call_user(old, EVENTS, {}, "m.py", sample="hzz") == "old"
    assert transform.call_user(new, EVENTS, {}, "m.py", sample="hzz") == "hzz"
    assert transform.call_user(kwargs, EVENTS, {}, "m.py", sample="zmm") == "zmm"
    assert transform.call_user(new, EVENTS, {}, "m.py") == ""  # no samples: called as before


def test_shard_names_carry_the_sample() -> None:
    summ = [{"key": "k", "splits": {"train": {"rows": 10}}, "columns": ["a"], "weights": True,
             "ragged_values": {}, "events": 10,
             "collections": {"trk": {"layout": "padded", "max_length": 4, "channels": 3,
                                     "objects": 20}}}]
    plans = shards.plan([summ, summ], ["/d/a.root", "/e/a.root"], ["train"], 1 << 20,
                        ["sig", "bkg"])
    assert [p.name for p in plans] == ["train-sig.a-000.h5", "train-bkg.a-000.h5"]
    assert [p.file for p in plans] == [0, 1]
    assert shards.row_bytes(summ[0], "train") == 4 + 4 + 4 + 4 * (4 * 3 + 1) + 4


SPEC = """\
name: physics
inputs:
  tree: events
samples:
  sig:
    files: [data/a.root]
    label: signal
    xsec: 2.0
    lumi: 10
    weight_branch: gw
  bkg:
    files: [data/b.root]
    tree: other
    label: background
    scale: 0.5
collections:
  trk: {branches: [pt, eta], sort_by: pt, max_length: 8}
  mu: {branches: [pt], layout: ragged}
features:
  branches: [met]
output:
  dir: out
"""


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    (tmp_path / "data").mkdir()
    for name in ("a.root", "b.root"):
        (tmp_path / "data" / name).write_bytes(b"x")
    return tmp_path


def _load(folder: Path, text: str) -> Any:
    path = folder / "prep.yaml"
    path.write_text(textwrap.dedent(text))
    return load_prep_spec(path)


def _problems(folder: Path, text: str) -> list[str]:
    with pytest.raises(SpecError) as info:
        _load(folder, text)
    return info.value.problems


def test_samples_spec_without_a_function(folder: Path) -> None:
    spec = _load(folder, SPEC)
    assert spec.module_path is None and spec.classes == ["signal", "background"]
    sig, bkg = spec.samples
    assert (sig.name, sig.label, sig.tree, sig.xsec, sig.weight_branch) == ("sig", 0, "events",
                                                                            2.0, "gw")
    assert (bkg.name, bkg.label, bkg.tree, bkg.scale) == ("bkg", 1, "other", 0.5)
    assert spec.files == [(folder / "data" / n).resolve() for n in ("a.root", "b.root")]
    info = spec.collection_info()
    assert info["trk"]["columns"] == ["pt", "eta"] and info["mu"]["layout"] == "ragged"
    config = spec.config()
    assert config["collections"]["trk"]["max_length"] == 8
    assert [s["name"] for s in config["samples"]] == ["sig", "bkg"]
    assert "scale" not in config["samples"][1]  # a weight factor rewrites shards, not chunks


def test_explicit_classes_map_names(folder: Path) -> None:
    spec = _load(folder, SPEC.replace("name: physics\n",
                                      "name: physics\nclasses: [background, signal]\n"))
    assert [s.label for s in spec.samples] == [1, 0]


@pytest.mark.parametrize("change, says", [
    (("max_length: 8", "layout: padded"), "collections.trk: layout padded needs max_length"),
    (("    label: background\n", "    label: nope\n"), None),
    (("    lumi: 10\n", ""), "xsec and lumi go together"),
    (("  mu: {", "  x: {"), "name 'x'"),
    (("  bkg:\n", "  b/g:\n"), "sample name 'b/g'"),
    (("files: [data/b.root]", "files: [data/none.root]"), "samples.bkg.files.0: 'data/none.root' "
                                                          "matches no file"),
    (("inputs:\n  tree: events\n", "inputs:\n  files: [data/a.root]\n"),
     "files/dids given with `samples`"),
])
def test_bad_samples_and_collections(folder: Path, change: tuple[str, str],
                                     says: str | None) -> None:
    text = SPEC.replace(*change)
    if says is None:  # an unknown class name with explicit classes
        text = text.replace("name: physics\n", "name: physics\nclasses: [background, signal]\n")
        says = "samples.bkg.label: 'nope' is not one of classes ['background', 'signal']"
    problems = _problems(folder, text)
    assert any(says in p for p in problems), problems


def test_a_sample_without_label_needs_a_function(folder: Path) -> None:
    problems = _problems(folder, SPEC.replace("    label: background\n", ""))
    assert any("samples.bkg: no label and no preprocess function" in p for p in problems)


def test_the_function_may_return_collection_branches() -> None:
    """A sample whose files have no such jagged branches (e.g. flat mu1_pt, mu2_pt) gets its
    collection from the function; branches it does not return come from the events."""
    made = {"pt": ak.Array([[7.0, 6.0], [1.0], [], [2.0]])}
    rows = _rows({"x": {}, "collections": {"trk": made}}, label=0,
                 collections={"trk": {**PADDED, "branches": ["pt"], "max_length": 3}})
    np.testing.assert_array_equal(rows.collections["trk"][""][:, :, 0],
                                  [[7, 6, 0], [1, 0, 0], [0, 0, 0], [2, 0, 0]])
    zipped = ak.zip({"pt": made["pt"], "eta": made["pt"] * 0.1})
    rows = _rows({"x": {}, "collections": {"trk": zipped}}, label=0,
                 collections={"trk": {**RAGGED, "branches": ["eta", "pt"]}})
    np.testing.assert_allclose(rows.collections["trk"]["values"][:, 1], [7, 6, 1, 2])
    with pytest.raises(ChunkProblem, match="does not list under collections"):
        _rows({"x": {}, "collections": {"other": made}}, label=0)
    with pytest.raises(ChunkProblem, match="'nope' not in the input"):
        _rows({"x": {}, "collections": {"trk": made}}, label=0,
              collections={"trk": {**PADDED, "branches": ["pt", "nope"]}})


def test_sample_weight_factors(folder: Path) -> None:
    from gridml.prepare.commit import sample_weights
    from gridml.prepare.inputs import InputFile

    spec = _load(folder, SPEC.replace("    scale: 0.5\n", "    scale: 0.5\n    xsec: 3.0\n"
                                      "    lumi: 4.0\n"))
    files = [InputFile(p, str(p), "root", "d", "a", 1, 10, {}, sample=s)
             for p, s in zip(spec.files, ("sig", "bkg"))]
    chunks = [[{"events": 6, "sumw": 2.5}, {"events": 4, "sumw": -0.5}],  # negative weights count
              [{"events": 10}]]  # no weight_branch: the events are the sum
    out = sample_weights(spec, files, chunks)
    assert out["sig"]["sum_weights"] == 2.0 and out["sig"]["events"] == 10
    assert out["sig"]["weight_scale"] == pytest.approx(2.0 * 10 / 2.0)
    assert out["bkg"]["weight_scale"] == pytest.approx(0.5 * 3.0 * 4.0 / 10)
    chunks[0][1]["sumw"] = -2.5
    with pytest.raises(DataError, match="sample sig: the generator weights .gw. sum to 0"):
        sample_weights(spec, files, chunks)
