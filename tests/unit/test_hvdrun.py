"""payloads.hvdrun: horovodrun with its build probe answered from Horovod's TensorFlow library
(the real library of this environment), and Horovod's own probe wherever that cannot answer."""

from __future__ import annotations

import subprocess
import sys

from payloads import hvdrun
from tests.helpers import ROOT


def test_the_probe_reads_this_environments_horovod_build() -> None:
    # setup.sh builds Horovod with Gloo and MPI (HOROVOD_WITH_GLOO=1, HOROVOD_WITH_MPI=1)
    assert hvdrun.probe() == {"gloo": True, "mpi": True}


def test_a_probe_that_cannot_ask_answers_nothing() -> None:
    assert hvdrun.probe("/bin/false") == {}
    assert hvdrun.probe(str(ROOT / "no-such-python")) == {}


def test_only_a_yes_skips_horovods_own_probe() -> None:
    asked: list[bool] = []

    def horovods(verbose: bool = False) -> bool:
        asked.append(verbose)
        return False

    assert hvdrun._answered(True, horovods)(verbose=True) is True and asked == []
    assert hvdrun._answered(False, horovods)(verbose=True) is False and asked == [True]


def test_horovodruns_usage_errors_are_its_own() -> None:
    proc = subprocess.run([sys.executable, "-m", "payloads.hvdrun", "--gloo"], capture_output=True,
                          text=True, timeout=60, cwd=ROOT, check=False)
    assert proc.returncode == 2 and "horovodrun: error:" in proc.stderr and "-np" in proc.stderr
