"""gridml's training payload: ``python -m payloads.train_keras trial.json`` under horovodrun
(or alone, for a one-worker trial: one Horovod rank on Gloo).

Trains the user's Keras model data-parallel with Horovod (docs/trial-contract.md): thread pools
sized from the trial's cores before TensorFlow starts, one GPU per rank (else CPU), a disjoint
shuffled shard of the HDF5 files per rank read ahead in background threads, metrics averaged
over ranks, rank 0 reporting every epoch (spool, then POST) and checkpointing, and at the end
model.keras, curves.png, provenance.json and result.json in the output directory.
Exit codes: 0 done (completed or pruned), 1 training failed, 2 bad trial file/model file,
3 bad input data. The last line on stderr is the reason.
"""

from __future__ import annotations

import os
import sys
from collections.abc import MutableMapping

from payloads.runtime import threads
from payloads.runtime.entry import run_payload
from payloads.runtime.trial import TrialDoc


def _start(cfg: TrialDoc, plan: threads.ThreadPlan) -> int:
    from payloads.runtime.fit import run  # lazy: imports TensorFlow, after the thread setup

    return run(cfg, plan)


# Set by the launchers Horovod runs under (horovodrun, mpirun, srun's PMI).
_LAUNCHED = ("HOROVOD_RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK")


def single_process_horovod(environ: MutableMapping[str, str] = os.environ) -> None:
    """Started without a launcher (gridml runs a one-worker trial so): Horovod's Gloo controller
    in this one process. Its default, an MPI singleton, needs OpenMPI's orted on PATH and fails
    without it; a job's own setting is kept."""
    if not any(v in environ for v in _LAUNCHED):
        environ.setdefault("HOROVOD_CONTROLLER", "gloo")
        environ.setdefault("HOROVOD_CPU_OPERATIONS", "gloo")


def main(argv: list[str] | None = None) -> int:
    single_process_horovod()
    rank = int(os.environ.get("HOROVOD_RANK", os.environ.get("OMPI_COMM_WORLD_RANK", 0)))
    return run_payload(sys.argv[1:] if argv is None else argv, rank=rank, framework="keras",
                       usage="python -m payloads.train_keras TRIAL.json", start=_start)


if __name__ == "__main__":
    raise SystemExit(main())
