"""`gridml evaluate` (phpo's evaluation payload) builds the point's trial document from the
task's template: the spec's data section survives whole (event weights, collections, derived
views, the open-file bound), with the job's staged files in place of the template's."""

from __future__ import annotations

import json
from pathlib import Path

from gridml.phpo.evaluate import Files, prepare
from payloads.runtime import trial as contract


def test_weights_collections_and_views_reach_the_payload(tmp_path: Path) -> None:
    (tmp_path / "model.py").write_text("def build_model(hparams, input_shape): ...\n")
    for name in ("t.h5", "v.h5"):
        (tmp_path / name).write_bytes(b"")
    view = {"name": "kin", "collection": "tracks", "columns": ["pt", "eta"]}
    data = contract.Data(features=("x", "tracks"), labels="y", weights="w",
                         collections=("tracks",), views=(view,), max_open_files=64,
                         train=("/controller/train.h5",), validation=("/controller/val.h5",),
                         layouts=("/controller/inputs/a.layout.json",))
    template = tmp_path / "gridml_trial.json"
    doc = contract.TrialDoc(study="phpo", trial_id=1, trial_number=0, hparams={},
                            model_file=Path("/controller/model.py"), data=data,
                            training=contract.Training(framework="torch"),
                            output_dir=Path("/controller/out"))
    template.write_text(doc.dumps())
    (tmp_path / "input.json").write_text(json.dumps({"units": 8}))
    (tmp_path / "input_ds.json").write_text(json.dumps({"train": ["t.h5"],
                                                        "validation": ["v.h5"]}))
    files = Files(input=tmp_path / "input.json", training_data=tmp_path / "input_ds.json")
    got, _ = prepare(template, files, tmp_path, None, None)
    written = json.loads((tmp_path / "trial.json").read_text())["data"]
    for d in (got.data, contract.TrialDoc.from_json(json.loads(
            (tmp_path / "trial.json").read_text())).data):
        assert d.weights == "w" and d.collections == ("tracks",) and d.views == (view,)
        assert d.max_open_files == 64 and d.layouts == () and d.test == ()
        assert d.train == (str(tmp_path / "t.h5"),) and d.validation == (str(tmp_path / "v.h5"),)
    assert "layouts" not in written  # written only when there are some
