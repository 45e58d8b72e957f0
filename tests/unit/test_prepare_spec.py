"""The prepare spec: valid specs load; every mistake is refused as file:line: field: fix."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from gridml.errors import SpecError
from gridml.prepare.spec import json_schema, load_prep_spec, parse_size

GOOD = """\
name: taus
inputs:
  files: [data/*.root]
  tree: events
  chunk_size: 1000
preprocess:
  module: prep.py
features:
  pad:
    trk_pt: {length: 4}
split:
  fractions: {train: 0.5, val: 0.5}
  key: [run, event]
output:
  dir: out
  shard_size: 1MB
"""


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "a.root").write_bytes(b"x")
    (tmp_path / "prep.py").write_text("def process(events, params):\n    return {}\n")
    return tmp_path


def _load(folder: Path, text: str) -> object:
    path = folder / "prep.yaml"
    path.write_text(textwrap.dedent(text))
    return load_prep_spec(path)


def _problems(folder: Path, text: str) -> list[str]:
    with pytest.raises(SpecError) as info:
        _load(folder, text)
    return info.value.problems


def test_good_spec_resolves_paths(folder: Path) -> None:
    spec = _load(folder, GOOD)
    assert spec.files == [(folder / "data" / "a.root").resolve()]
    assert spec.module_path == (folder / "prep.py").resolve()
    assert spec.out_dir == (folder / "out").resolve()
    assert spec.model.output.shard_size == 1024 * 1024
    assert spec.model.features.pad["trk_pt"].length == 4
    assert spec.config()["split"]["key"] == ["run", "event"]


def test_unknown_key_is_refused_with_its_line(folder: Path) -> None:
    problems = _problems(folder, GOOD.replace("  chunk_size: 1000", "  chunk_sise: 1000"))
    assert problems == [f"{folder / 'prep.yaml'}:5: inputs.chunk_sise: unknown key; "
                        "did you mean chunk_size?"]


def test_unknown_key_far_from_any_field_points_to_the_docs(folder: Path) -> None:
    problems = _problems(folder, GOOD.replace("  chunk_size: 1000", "  zzz: 1000"))
    assert problems == [(f"{folder / 'prep.yaml'}:5: inputs.zzz: unknown key; remove it "
                         "or check its spelling (see docs/prepare.md)")]


def test_fractions_must_sum_to_one(folder: Path) -> None:
    problems = _problems(folder, GOOD.replace("val: 0.5", "val: 0.4"))
    assert len(problems) == 1
    assert problems[0].startswith(f"{folder / 'prep.yaml'}:12: split.fractions: ")
    assert "sum to 0.9; make them sum to 1" in problems[0]


def test_every_problem_is_reported_at_once(folder: Path) -> None:
    text = GOOD.replace("data/*.root", "nothing/*.root").replace("prep.py", "missing.py")
    problems = _problems(folder, text)
    assert len(problems) == 2
    assert problems[0].startswith(f"{folder / 'prep.yaml'}:3: inputs.files.0: ")
    assert "matches no file" in problems[0]
    assert problems[1].startswith(f"{folder / 'prep.yaml'}:7: preprocess.module: ")
    assert "no such file" in problems[1]


def test_module_without_the_function(folder: Path) -> None:
    (folder / "prep.py").write_text("def other(events, params):\n    return {}\n")
    problems = _problems(folder, GOOD)
    assert "defines no function 'process'" in problems[0]
    assert problems[0].startswith(f"{folder / 'prep.yaml'}:7: preprocess.module:")


def test_no_inputs_and_no_preprocess_are_refused(folder: Path) -> None:
    text = GOOD.replace("  files: [data/*.root]\n", "").replace("preprocess:\n  module: prep.py\n", "")
    problems = _problems(folder, text)
    assert any(": inputs: files: no inputs" in p for p in problems), problems
    assert any(": preprocess: missing: give the preprocessing module" in p for p in problems)


def test_pad_and_ragged_are_exclusive(folder: Path) -> None:
    text = GOOD.replace("    trk_pt: {length: 4}\n", "    trk_pt: {length: 4}\n  ragged: [trk_pt]\n")
    problems = _problems(folder, text)
    assert "features.ragged" in problems[0] and "padded or ragged, not both" in problems[0]


@pytest.mark.parametrize("bad, where", [
    ("  chunk_size: 0", "inputs.chunk_size"),
    ("  shard_size: lots", "output.shard_size"),
    ("  dir: out\n  dataset: no-scope", "output.dataset"),
    ("  dir: out\n  compression: zstd", "output.compression"),
])
def test_bad_values(folder: Path, bad: str, where: str) -> None:
    key = bad.split(":")[0]
    text = "\n".join(bad if line.startswith(key + ":") else line for line in GOOD.splitlines())
    problems = _problems(folder, text + "\n")
    assert any(f": {where}: " in p for p in problems), problems


def test_yaml_syntax_and_duplicates(folder: Path) -> None:
    assert "not valid YAML" in _problems(folder, "name: [unclosed\n")[0]
    dup = _problems(folder, GOOD + "name: again\n")
    assert dup[0].endswith("name: duplicate key (first on line 1); keep one")


def test_sizes_and_schema() -> None:
    assert parse_size("64MB") == 64 << 20 and parse_size("512k") == 512 << 10
    assert parse_size(2048) == 2048
    with pytest.raises(ValueError):
        parse_size("big")
    schema = json_schema()
    assert schema["additionalProperties"] is False
    # inputs and preprocess are optional since a spec may list `samples` (with labels) instead
    assert {"name", "output"} <= set(schema["required"])
    assert {"inputs", "preprocess", "samples", "collections"} <= set(schema["properties"])
