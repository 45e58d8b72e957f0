"""``python -m payloads.hvdrun ARGS``: Horovod's launcher (horovodrun, the same arguments, the same
code: ``horovod.runner.launch.run_commandline``), with its build probe answered in half a second.

Before it starts a rank, horovodrun asks whether Horovod was built with Gloo (``--gloo``) or MPI
(``--mpi``): ``horovod.common.util.gloo_built`` forks a child that imports ``horovod.tensorflow``,
all of TensorFlow, to call one C function. That is ~5 s of CPU, and as much wall time, before
every multi-rank Keras trial (measured: 5.7 s of CPU for horovodrun with two ranks that only
sleep, 4.5 s of it the probe).

Here a child process loads only the shared libraries that function needs (TensorFlow's two C++
libraries, then Horovod's ``horovod/tensorflow/mpi_lib``, with ctypes as Horovod's own
``HorovodBasics`` does) and calls ``horovod_gloo_built`` / ``horovod_mpi_built``: ~0.5 s. Where
that answers yes, horovodrun is told so; anything else (a library not where TensorFlow 2 keeps
it, a build without the controller) goes to Horovod's own probe, so a wrong answer is never
given and horovodrun's own message still names a missing controller. Everything after the probe
(the rendezvous, the ranks, their output prefixes, the exit codes) is horovodrun's.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from typing import Any

# run in a child: the launcher itself never maps TensorFlow's libraries
_PROBE = r"""
import ctypes, importlib.util, json, os
tf = importlib.util.find_spec("tensorflow").submodule_search_locations[0]
for name in ("libtensorflow_framework.so.2", "libtensorflow_cc.so.2"):
    ctypes.CDLL(os.path.join(tf, name), mode=ctypes.RTLD_GLOBAL)
from horovod.common.util import get_extension_full_path
hvd_tf = importlib.util.find_spec("horovod.tensorflow").origin
lib = ctypes.CDLL(get_extension_full_path(hvd_tf, "mpi_lib"), mode=ctypes.RTLD_GLOBAL)
print(json.dumps({"gloo": bool(lib.horovod_gloo_built()), "mpi": bool(lib.horovod_mpi_built())}))
"""


def probe(python: str | None = None) -> dict[str, bool]:
    """{"gloo": .., "mpi": ..} from Horovod's TensorFlow library, asked by ``python`` (default:
    this interpreter) in a child; {} where it could not be asked."""
    try:
        out = subprocess.run([python or sys.executable, "-c", _PROBE], capture_output=True, text=True,
                             timeout=120, check=False)
        answer = json.loads(out.stdout.strip().splitlines()[-1]) if out.returncode == 0 else {}
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return {}
    return {k: v for k, v in answer.items() if k in ("gloo", "mpi") and isinstance(v, bool)} \
        if isinstance(answer, dict) else {}


def _answered(known: bool, horovods: Callable[..., Any]) -> Callable[..., Any]:
    """Yes where the probe said yes; otherwise Horovod's own probe (and its own message)."""
    def built(verbose: bool = False) -> Any:
        return True if known else horovods(verbose=verbose)
    return built


def main(argv: list[str] | None = None) -> Any:
    """horovodrun's ``run_commandline`` on ``argv`` (default: this process's arguments); what
    it returns is what horovodrun exits with."""
    from horovod.runner import launch  # type: ignore[import-not-found, import-untyped]

    flags = set(sys.argv[1:] if argv is None else argv)
    wanted = [c for c in ("gloo", "mpi") if f"--{c}" in flags]
    built = probe() if wanted else {}  # neither flag: horovodrun decides, with its own probes
    launch.gloo_built = _answered(built.get("gloo", False), launch.gloo_built)
    launch.mpi_built = _answered(built.get("mpi", False), launch.mpi_built)
    if argv is not None:
        sys.argv = [sys.argv[0], *argv]
    sys.argv[0] = "horovodrun"  # its usage and error lines name the launcher users know
    return launch.run_commandline()


if __name__ == "__main__":
    sys.exit(main())
