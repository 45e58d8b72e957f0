"""The user's code travels as a sandbox: a two-file model package through the PanDA double.

The model file imports a helper module next to it; ``payload.files`` names both. ``gridml submit``
packs them, uploads the tarball with panda-client's ``Client.putFile`` into the double's cache,
names it in the task (``sourceURL`` + ``-a``); the double's pilot fetches it from ``/cache/`` as
runGen does, the pilot wrapper unpacks it, and the real Keras payload trains one epoch with it.
"""

from __future__ import annotations

import tarfile
import textwrap
from pathlib import Path

import pytest

from tests.helpers import gridml
from tests.panda_double import PandaDouble
from tests.panda_double.campaign import make_campaign, panda_spec, register_sample_data

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.service]

HELPER = '''\
from tensorflow import keras


def head(h):
    return keras.layers.Dense(1, activation="sigmoid", dtype="float32", name="out")(h)
'''
MODEL = '''\
from tensorflow import keras

from tinyhelpers import head  # the second file of the package, from the sandbox


def build_model(hparams, input_shape):
    inputs = keras.Input(shape=tuple(input_shape))
    h = keras.layers.Dense(int(hparams["units"]), activation="relu")(inputs)
    return keras.Model(inputs, head(h))
'''


def test_a_two_file_model_package_runs_through_the_double(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GRIDML_HOME", str(tmp_path / "home"))
    train, val = register_sample_data(tmp_path, n_train=600, n_val=200, files=1)
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "tinymodel.py").write_text(MODEL)
    (pkg / "tinyhelpers.py").write_text(HELPER)
    (pkg / "notes.txt").write_text("not in payload.files: stays home\n")
    spec = panda_spec(
        tmp_path, "sandboxed", train, val,
        payload=f"payload:\n  model: {pkg / 'tinymodel.py'}\n  files: [tinymodel.py, tinyhelpers.py]\n",
        training="training: {epochs: 1, batch_size: 128, metrics: [accuracy], workers: 1}\n",
        resources="resources: {cores: 1, gpus: 0, memory_gb: 2, walltime: 20m}\n",
        search=textwrap.dedent("""\
            search:
              algorithm: random
              max_trials: 1
              parallel: 1
              seed: 1
              space:
                units: {type: int, low: 4, high: 8}
            """))
    with PandaDouble(tmp_path / "panda") as panda:
        for key, value in panda.client_env().items():
            monkeypatch.setenv(key, value)
        proc = gridml("submit", str(spec), "--quiet", timeout=900)
        c = make_campaign(spec)
        trials = c.store.list_trials(c.study.id)
        task = next(iter(panda.jedi.tasks.values()))
        assert [t.state for t in trials] == ["completed"], (proc.stderr[-3000:], task.jobs[0].diag)
        name = next(p["value"][3:] for p in task.params["jobParameters"]
                    if str(p.get("value", "")).startswith("-a "))
        assert task.params["sourceURL"] == panda.url.split("/server")[0]
        assert "POST file_server/upload_cache_file" in panda.api.calls
        assert f"GET cache/{name}" in panda.api.calls  # the pilot fetched it like runGen
        assert panda.api.uploads == [name] and name.startswith("jobO.gridml-")
        with tarfile.open(panda.api.cache / name) as tar:
            assert sorted(tar.getnames()) == ["tinyhelpers.py", "tinymodel.py"]
        assert (task.jobs[0].workdir / "tinyhelpers.py").is_file()
        assert trials[0].objective is not None
