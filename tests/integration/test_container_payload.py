"""A torch trial run by the local executor in a podman container (``resources.container``).

The image is the one scripts/payload-image.sh builds from Debian's archive alone (debootstrap
bookworm + python3 3.11, ``podman import``; no registry): the operating system, with the
project's environment (and the venv's base Python) mounted read-only through ``payload.python``
(docs/containers.md). The first build takes minutes (7.5 on the loaded CI machine); the script
caches it (podman's storage, and the root filesystem under ~/.cache/gridml/images), so later runs
reuse it in about 2 s. Where podman's defaults cannot start a container here (no
CAP_SYS_RESOURCE, hybrid cgroups) the script names a containers.conf that works, passed on as
CONTAINERS_CONF.

Skipped only where podman or debootstrap is missing outside CI (CI=1 fails instead), or where
this machine cannot run a container at all (podman's own words in the reason).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import ROOT, gridml, gridml_json, write_spec

pytestmark = pytest.mark.slow

# podman's errors where the machine, not the image or gridml, keeps a container from running
CANNOT_RUN = ("user namespace", "newuidmap", "newgidmap", "cgroup", "unshare", "clone3",
              "operation not permitted", "permission denied", "overlay is not supported",
              "kernel does not support")


@pytest.fixture(scope="module")
def podman_env() -> dict[str, str]:
    """What podman needs in the environment here (CONTAINERS_CONF), filled by ``image``."""
    return {}


@pytest.fixture(scope="module")
def image(podman_env: dict[str, str]) -> str:
    env = podman_env
    if shutil.which("podman") is None:
        why = "podman is not installed: scripts/system-deps.sh installs it"
        if os.environ.get("CI"):
            pytest.fail(why)
        pytest.skip(why)
    built = subprocess.run(["bash", str(ROOT / "scripts" / "payload-image.sh"), "base"],
                           capture_output=True, text=True, timeout=1500)
    words = built.stderr.strip().splitlines()[-1:] or [f"exit {built.returncode}"]
    if built.returncode == 3:  # debootstrap missing (podman is there)
        if os.environ.get("CI"):
            pytest.fail(words[0])
        pytest.skip(words[0])
    if built.returncode == 4:  # the image is built and imported, but podman cannot start it here
        if any(p in built.stderr.lower() for p in CANNOT_RUN):
            pytest.skip(f"the image was built, but this machine cannot run a podman container: "
                        f"{words[0]}")
    assert built.returncode == 0, built.stderr[-4000:]
    lines = built.stdout.strip().splitlines()
    name = lines[-1]
    # where podman's defaults fail here (no CAP_SYS_RESOURCE, hybrid cgroups) the script wrote a
    # containers.conf that works: podman reads it from $CONTAINERS_CONF
    conf = [x.split("=", 1)[1] for x in lines if x.startswith("CONTAINERS_CONF=")]
    if conf:
        env["CONTAINERS_CONF"] = conf[0]
    probe = subprocess.run(["podman", "run", "--rm", "--network=host", name, "python3", "-c",
                            "import sys; print(*sys.version_info[:2])"],
                           capture_output=True, text=True, timeout=120, env={**os.environ, **env})
    assert probe.returncode == 0, f"podman run {name}: {probe.stderr[-3000:]}"
    assert probe.stdout.strip(), probe.stderr
    return name


def test_a_torch_trial_runs_in_the_container(image: str, podman_env: dict[str, str],
                                             tmp_path: Path) -> None:
    out = gridml("demo-data", "--n-train", "600", "--n-val", "200", "--files", "1").stdout
    train, val = "user.demo:quickstart.train", "user.demo:quickstart.val"
    assert f"registered {train}" in out, out
    # the model says where it runs: podman puts /run/.containerenv into every container
    models = tmp_path / "models"
    models.mkdir()
    source = (ROOT / "examples" / "models" / "deepsets_torch.py").read_text()
    (models / "m.py").write_text(source + "\nimport os as _os\n\nprint('[in-container]', "
                                 "_os.path.exists('/run/.containerenv'), flush=True)\n")
    assert not Path("/run/.containerenv").exists()  # this machine itself is no podman container
    spec = write_spec(
        tmp_path / "c.yaml", "in-container", train, val,
        payload=f"payload:\n  framework: torch\n  model: {models / 'm.py'}\n  python: {sys.executable}\n",
        training="training: {epochs: 1, batch_size: 128, metrics: [accuracy], workers: 1}\n",
        search=("search: {algorithm: random, objective: val_loss, max_trials: 1, parallel: 1, "
                "seed: 3, space: {learning_rate: {type: real, low: 1.0e-3, high: 1.0e-2}, "
                "units: {type: int, low: 8, high: 16}}}\n"),
        resources=f"resources: {{cores: 1, gpus: 0, memory_gb: 2, walltime: 10m, container: '{image}'}}\n")
    env = {"PYTHONPATH": str(ROOT), "GRIDML_CONTAINER_RUNTIME": "podman", **podman_env}
    gridml("submit", str(spec), "--quiet", env=env, timeout=300)
    doc = gridml_json("status", "in-container", env=env)
    assert [t["state"] for t in doc["trials"]] == ["completed"], doc["trials"]
    home = Path(os.environ["GRIDML_HOME"])
    logs = list(home.rglob("attempt-1/payload.log"))
    assert len(logs) == 1, logs
    log = logs[0].read_text()
    assert "[in-container] True" in log and "[in-container] False" not in log, log[-3000:]
    outputs = logs[0].parent.parent / "outputs"
    assert json.loads((outputs / "result.json").read_text())["state"] == "completed"
    # the model and its provenance were written from inside, through the read-write mount
    assert (outputs / "model.pt").stat().st_size > 0
    assert json.loads((outputs / "provenance.json").read_text())["framework"] == "torch"
    # and its epoch is in the controller's store
    assert doc["trials"][0]["epochs_done"] == 1, doc["trials"][0]
