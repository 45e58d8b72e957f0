"""gridml's training payload: ``python -m payloads.train_keras trial.json`` under horovodrun.

Trains the user's Keras model data-parallel with Horovod (docs/trial-contract.md): thread pools
sized from the trial's cores before TensorFlow starts, one GPU per rank (else CPU), a disjoint
shuffled shard of the HDF5 files per rank read ahead in background threads, metrics averaged
over ranks, rank 0 reporting every epoch (spool, then POST) and checkpointing, and at the end
model.keras, curves.png, provenance.json and result.json in the output directory.
Exit codes: 0 done (completed or pruned), 1 training failed, 2 bad trial file/model file,
3 bad input data. The last line on stderr is the reason.
"""

from __future__ import annotations

import logging
import os
import sys
import traceback

from payloads.runtime import threads
from payloads.runtime.errors import PayloadFailure
from payloads.runtime.trial import load_trial

log = logging.getLogger("gridml.payload")


def _setup_logging(rank: int) -> None:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format=f"%(asctime)s [payload r{rank}] %(message)s", datefmt="%H:%M:%S")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python -m payloads.train_keras TRIAL.json", file=sys.stderr)
        return 2
    _setup_logging(int(os.environ.get("HOROVOD_RANK", os.environ.get("OMPI_COMM_WORLD_RANK", 0))))
    try:
        cfg = load_trial(argv[0])
        plan = threads.plan_threads(cfg.cores, threads.local_ranks())
        threads.apply_env(plan)  # before TensorFlow is imported anywhere
        from payloads.runtime.fit import run  # imports TensorFlow: after the thread setup

        return run(cfg, plan)
    except PayloadFailure as e:
        print(f"gridml payload error: {e}", file=sys.stderr, flush=True)
        return e.code
    except KeyboardInterrupt:
        print("gridml payload error: interrupted", file=sys.stderr, flush=True)
        return 130
    except Exception as e:
        traceback.print_exc()
        reason = " ".join(str(e).split())[:400]
        print(f"gridml payload error: {type(e).__name__}: {reason}", file=sys.stderr, flush=True)
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
