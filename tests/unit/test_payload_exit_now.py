"""A torchrun rank that finished ends through ``entry.exit_now``: its buffered output and log
lines still come out, its exit code is the one given, and no interpreter teardown (atexit hooks:
torch's own took 2-3 s of every trial) runs."""

from __future__ import annotations

import subprocess
import sys

from tests.helpers import ROOT

CODE = ("import atexit, logging, sys\n"
        "from payloads.runtime.entry import exit_now\n"
        "atexit.register(lambda: print('TEARDOWN', flush=True))\n"
        "logging.basicConfig(stream=sys.stderr, format='%(message)s')\n"
        "logging.getLogger('gridml.payload').warning('last log line')\n"
        "print('buffered', end='')\n"
        "exit_now(int(sys.argv[1]))\n")


def test_exit_now_flushes_and_skips_the_teardown() -> None:
    for code in (0, 5):
        proc = subprocess.run([sys.executable, "-c", CODE, str(code)], capture_output=True,
                              text=True, cwd=ROOT, timeout=60, check=False)
        assert proc.returncode == code
        assert proc.stdout == "buffered"  # written, and no atexit hook ran
        assert "last log line" in proc.stderr
