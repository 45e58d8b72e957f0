"""The real two-node Slurm cluster for the tests here (tests/slurm/slurm_fixtures.py)."""

from tests.slurm.slurm_fixtures import slurm_cluster, slurm_env  # noqa: F401
