"""`gridml submit --dry-run` on Slurm prints the exact batch scripts of the first trials
(golden files tests/golden/slurm/*.sh, paths normalised); the batch script's pieces."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from gridml.data import open_data_manager
from gridml.executors.slurm.render import slurm_time
from tests.helpers import ROOT, gridml, register_tiny_datasets, write_spec

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "slurm"
TORCH_PAYLOAD = f"payload: {{framework: torch, model: {ROOT / 'examples/models/deepsets_torch.py'}}}\n"
CASES = {
    "two_nodes": dict(
        training="training: {epochs: 2, batch_size: 64, workers: 8, horovod: mpi}\n",
        resources="resources: {nodes: 2, cores: 8, gpus: 4, memory_gb: 64, walltime: 6h}\n",
        slurm="slurm:\n  partition: gpu\n  account: atlas\n  constraint: a100\n"
              "  setup: ['module load cuda/12.2', 'source /sw/env/bin/activate']\n"
              "  options: {exclusive: true, gpus-per-task: 1}\n"),
    "one_node_container": dict(
        training="training: {epochs: 1, batch_size: 64, workers: 2}\n",
        resources="resources: {cores: 4, memory_gb: 8, walltime: 30h, "
                  "container: /sw/images/gridml.sif}\n",
        slurm="slurm: {qos: short}\n"),
    "one_node_mpi": dict(  # Horovod's MPI controller under mpirun: horovodrun -H localhost fails in Slurm
        training="training: {epochs: 1, batch_size: 64, workers: 2, horovod: mpi}\n",
        resources="resources: {cores: 2, memory_gb: 4, walltime: 1h}\n",
        slurm="slurm: {partition: cpu}\n"),
    "torch_two_nodes": dict(
        payload=TORCH_PAYLOAD,
        training="training: {epochs: 1, batch_size: 64, workers: 4}\n",
        resources="resources: {nodes: 2, cores: 4, memory_gb: 8, walltime: 1h}\n",
        slurm="slurm: {partition: cpu}\n"),
    "torch_one_node": dict(
        payload=TORCH_PAYLOAD,
        training="training: {epochs: 1, batch_size: 64, workers: 2}\n",
        resources="resources: {cores: 2, memory_gb: 4, walltime: 1h}\n",
        slurm="slurm: {partition: cpu}\n"),
}


def _normalise(text: str, tmp: Path) -> str:
    text = re.sub(r'export PATH=\S+:"\$PATH"', 'export PATH=<ENV>/bin:"$PATH"', text)
    text = text.replace(str(tmp), "<TMP>").replace(str(ROOT), "<ROOT>")
    return re.sub(r"/\S*/gridml-dryrun-[^/]+", "<DRYRUN>", text)


@pytest.mark.parametrize("case", sorted(CASES))
def test_dry_run_prints_the_batch_script(case: str, tmp_path: Path, gridml_home: Path) -> None:
    data = open_data_manager("local")
    train, val = register_tiny_datasets(data, tmp_path, "user.test")
    spec = write_spec(tmp_path / "spec.yaml", f"dry-{case.replace('_', '-')}", train, val,
                      backend="backend: {executor: slurm, data: local, server: embedded}\n",
                      **CASES[case])
    out = _normalise(gridml("submit", str(spec), "--dry-run").stdout, tmp_path)
    path = GOLDEN / f"{case}.sh"
    if os.environ.get("GRIDML_UPDATE_GOLDEN"):
        path.write_text(out)
    assert out == path.read_text(), f"update with GRIDML_UPDATE_GOLDEN=1 ({path})"
    assert out.count("#!/bin/bash") == 2  # search.parallel: 2 -> the first two trials


def test_walltime_is_written_as_slurm_time() -> None:
    assert slurm_time(90) == "00:01:30"
    assert slurm_time(6 * 3600) == "06:00:00"
    assert slurm_time(30 * 3600) == "1-06:00:00"
    assert slurm_time(5) == "00:01:00"  # Slurm's minimum


@pytest.mark.parametrize("resources,training,wanted", [
    ("{nodes: 2, cores: 1}", "{epochs: 1, workers: 3, horovod: mpi}", "2 nodes (2 on 2 nodes)"),
    ("{nodes: 2, cores: 8, gpus: 2}", "{epochs: 1, workers: 8, horovod: mpi}", "but 4 GPUs on 2 nodes"),
    ("{nodes: 2, cores: 4}", "{epochs: 1, workers: 1, horovod: mpi}", "leaves a node idle"),
    ("{nodes: 2, cores: 4}", "{epochs: 1, workers: 2}", "horovod: gloo cannot span nodes"),
    ("{nodes: 2, cores: 4}", "{epochs: 1, workers: 3}", "torch ranks on 2 nodes"),
])
def test_workers_must_fit_the_nodes(resources: str, training: str, wanted: str, tmp_path: Path,
                                    gridml_home: Path) -> None:
    data = open_data_manager("local")
    train, val = register_tiny_datasets(data, tmp_path, "user.test")
    spec = write_spec(tmp_path / "spec.yaml", "fit", train, val,
                      backend="backend: {executor: slurm, data: local, server: embedded}\n",
                      resources=f"resources: {resources}\n", training=f"training: {training}\n",
                      **({"payload": TORCH_PAYLOAD} if "torch" in wanted else {}))
    proc = gridml("validate", str(spec), check=False)
    assert proc.returncode == 2, proc.stdout
    lines = [ln for ln in (proc.stdout + proc.stderr).splitlines() if ln.strip()]
    assert len(lines) == 1 and wanted.split(" (")[0] in lines[0], lines
