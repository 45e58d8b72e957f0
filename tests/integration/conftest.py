"""Integration fixtures: the real Rucio server (tests/rucio/rucio_fixtures.py), the real Slurm
cluster (tests/slurm/slurm_fixtures.py)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "rucio"))

from rucio_fixtures import rucio_env, rucio_server, rucio_store  # noqa: F401
from tests.slurm.slurm_fixtures import slurm_cluster, slurm_env  # noqa: F401
