"""``training.horovod: mpi`` on one machine: horovodrun started as gridml starts it
(``python -m payloads.hvdrun ... --mpi``, its build probe answered by payloads/hvdrun.py) runs
its ranks under mpirun with Horovod's MPI controller. (The Gloo line runs in every multi-rank
Keras test: tests/integration/test_payload_train.py and the campaigns.)"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from gridml.planner import payload_command
from test_payload_train import payload_env

pytestmark = pytest.mark.slow

SCRIPT = """\
import horovod.tensorflow as hvd
hvd.init()
print(f"RANK {hvd.rank()} of {hvd.size()} mpi={hvd.mpi_enabled()} gloo={hvd.gloo_enabled()}")
"""


def test_two_ranks_under_mpirun_with_the_mpi_controller(tmp_path: Path) -> None:
    script = tmp_path / "ranks.py"
    script.write_text(SCRIPT)
    cmd = payload_command(2, "mpi", "unused.json", python=sys.executable)
    assert cmd[1:3] == ["-m", "payloads.hvdrun"] and "--mpi" in cmd
    cmd = cmd[:cmd.index("--mpi") + 1] + [sys.executable, str(script)]  # the ranks: this script
    env = payload_env()
    if os.geteuid() == 0:  # OpenMPI refuses root without these (the Slurm job script sets them too)
        env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    # mpirun tags and forwards what the ranks write in pieces: two ranks' lines can interleave
    ranks = sorted(re.findall(r"RANK (\d) of (\d) mpi=(\w+) gloo=(\w+)", proc.stdout))
    assert ranks == [("0", "2", "True", "False"), ("1", "2", "True", "False")], proc.stdout[-2000:]
