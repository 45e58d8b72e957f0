"""The real two-node Slurm cluster (scripts/slurm-cluster.sh) for tests.

``slurm_cluster`` (session): started once per pytest process in a folder of its own, stopped at
the end of the session; skipped where this machine cannot make network namespaces (not root),
failed in CI. ``slurm_env`` (function): SLURM_CONF set for the test and its subprocesses.
Tests using them carry ``pytest.mark.service``.

The cluster keeps accounting (slurmdbd on MariaDB) and forgets finished jobs in squeue after
MinJobAge=5 s: :meth:`SlurmCluster.squeue` adds the jobs that left the queue from ``sacct``, so a
test sees every job of the session; :meth:`SlurmCluster.sacct` asks accounting alone.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "slurm-cluster.sh"


@dataclass
class SlurmCluster:
    dir: Path
    conf: Path
    partition: str
    start_seconds: float

    @property
    def env(self) -> dict[str, str]:
        return {"SLURM_CONF": str(self.conf)}

    def script(self, *args: str, timeout: float = 300) -> str:
        proc = subprocess.run(["bash", str(SCRIPT), args[0], str(self.dir), *args[1:]],
                              capture_output=True, text=True, timeout=timeout)
        if proc.returncode != 0:
            raise AssertionError(f"slurm-cluster.sh {' '.join(args)}: {proc.stderr[-2000:]}")
        return proc.stdout

    def node_stop(self, node: str) -> None:
        self.script("node-stop", node)

    def node_start(self, node: str) -> None:
        self.script("node-start", node)

    def node_run(self, node: str, *argv: str) -> subprocess.CompletedProcess:
        """``argv`` in ``node``'s network namespace (what a process on that node reaches)."""
        return subprocess.run(["bash", str(SCRIPT), "node-run", str(self.dir), node, *argv],
                              capture_output=True, text=True, timeout=60)

    @contextlib.contextmanager
    def no_way_home(self) -> Iterator[str]:
        """The nodes reach slurmctld only: every other connection to this machine is refused
        as "no route to host" (scripts/slurm-cluster.sh cut-home); yields this machine's address
        on the nodes' network."""
        self.script("cut-home")
        try:
            yield self.conf.read_text().split("SlurmctldHost=", 1)[1].split("(", 1)[1].split(")")[0]
        finally:
            self.script("mend-home")

    def _cmd(self, *argv: str) -> str:
        return subprocess.run(list(argv), capture_output=True, text=True,
                              env={**os.environ, **self.env}, timeout=60).stdout

    def squeue(self, *args: str) -> str:
        """``squeue -t all ARGS``, then the jobs squeue no longer shows, from ``sacct``, in the
        same format (``-o`` with %i, %j, %T; ``--name``)."""
        shown = self._cmd("squeue", "--noheader", "-t", "all", *args)
        opts = dict(zip(args[::2], args[1::2]))
        fmt = opts.get("-o")
        if fmt is None or set(re.findall(r"%\.?\d*(\w)", fmt)) - {"i", "j", "T"}:
            return shown
        name = ["--name", opts["--name"]] if "--name" in opts else []
        queued = set(self._cmd("squeue", "--noheader", "-t", "all", "-o", "%i", *name).split())
        rows = []
        for job_id, job_name, state in self.sacct(*name):
            if job_id not in queued:
                values = {"i": job_id, "j": job_name, "T": state}
                rows.append(re.sub(r"%\.?\d*(\w)", lambda m, v=values: v[m[1]], fmt))
        return shown + "".join(row + "\n" for row in rows)

    def sacct(self, *args: str) -> list[tuple[str, str, str]]:
        """``sacct -X``: (job id, name, state) for every job of this cluster's session."""
        out = self._cmd("sacct", "-X", "-a", "--parsable2", "--noheader", "-S", "now-1days",
                        "-o", "JobID,JobName,State", *args)
        rows = []
        for line in out.splitlines():
            parts = line.split("|")
            if len(parts) == 3 and parts[0].isdigit():
                rows.append((parts[0], parts[1], parts[2].split()[0] if parts[2] else ""))
        return rows

    def cancel(self, *job_ids: str) -> None:
        if job_ids:
            subprocess.run(["scancel", *job_ids], capture_output=True, env={**os.environ, **self.env},
                           timeout=60)

    def jobs_named(self, name: str) -> list[str]:
        return self.squeue("--name", name, "-o", "%i").split()


_CLUSTER: SlurmCluster | None = None


def _start() -> SlurmCluster:
    global _CLUSTER
    if _CLUSTER is None:
        if os.geteuid() != 0 or shutil.which("ip") is None:
            if os.environ.get("CI"):
                pytest.fail("the Slurm test cluster needs root and iproute2 (network namespaces)")
            pytest.skip("the Slurm test cluster needs root (network namespaces, a bridge)")
        folder = Path(tempfile.mkdtemp(prefix="gridml-slurm-"))
        t0 = time.perf_counter()
        proc = subprocess.run(["bash", str(SCRIPT), "start", str(folder)], capture_output=True,
                              text=True, timeout=900)
        if proc.returncode != 0:
            pytest.fail(f"scripts/slurm-cluster.sh start failed: {proc.stderr[-3000:]}")
        _CLUSTER = SlurmCluster(folder, folder / "etc" / "slurm.conf", "gridml",
                                time.perf_counter() - t0)
        print(f"\n[slurm] cluster started in {_CLUSTER.start_seconds:.1f} s ({folder})")
    return _CLUSTER


def _stop() -> None:
    global _CLUSTER
    if _CLUSTER is not None:
        subprocess.run(["bash", str(SCRIPT), "stop", str(_CLUSTER.dir)], capture_output=True, timeout=120)
        shutil.rmtree(_CLUSTER.dir, ignore_errors=True)
        _CLUSTER = None


@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator[SlurmCluster]:
    yield _start()
    _stop()


@pytest.fixture
def slurm_env(slurm_cluster: SlurmCluster, monkeypatch: pytest.MonkeyPatch) -> SlurmCluster:
    for key, value in slurm_cluster.env.items():
        monkeypatch.setenv(key, value)
    return slurm_cluster
