"""gridml's PyTorch payload: ``torchrun ... -m payloads.train_torch trial.json`` (a one-worker
trial: ``python -m payloads.train_torch trial.json``, one rank and no process group).

Trains the user's ``torch.nn.Module`` data-parallel with DistributedDataParallel (gloo on CPU,
nccl on GPU) over the same input pipeline as the Keras payload (docs/payload.md): thread pools
sized from the trial's cores before torch is imported, one GPU per local rank (else CPU), a
disjoint shuffled shard per rank, metrics summed over ranks, rank 0 reporting every epoch (spool,
then POST) and checkpointing, and at the end model.pt, model.onnx, curves.png, provenance.json
and result.json. Needs neither TensorFlow nor Horovod.
Exit codes: 0 done (completed or pruned), 1 training failed, 2 bad trial file/model file,
3 bad input data, 130 interrupted. The last line on stderr is the reason. torchrun itself exits 1
whatever a rank's code was, so a failing rank also writes its code to ``$GRIDML_EXIT_FILE``
(set by the local executor and the pilot wrapper), which they report instead of torchrun's.
"""

from __future__ import annotations

import logging
import os
import sys

from payloads.runtime import threads
from payloads.runtime.entry import run_payload
from payloads.runtime.trial import TrialDoc

log = logging.getLogger("gridml.payload")


def die_with_launcher() -> None:
    """torchrun starts each rank in a session of its own, so a SIGKILL of torchrun (or of the
    trial's process group) would leave the ranks running as orphans: ask Linux to kill this
    rank when its parent, the launcher, dies (PR_SET_PDEATHSIG), and leave at once if it is
    already gone."""
    if not sys.platform.startswith("linux") or "TORCHELASTIC_RUN_ID" not in os.environ:
        return
    import ctypes
    import signal

    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() == 1:  # the launcher died before prctl took effect
        os._exit(137)


def record_exit_code(code: int) -> None:
    """Write this rank's failure code to ``$GRIDML_EXIT_FILE`` (when set), for the launcher's
    caller: the first rank to fail writes it; a specific code (2, 3, 130) replaces a plain 1
    (a rank that failed only because another one had left)."""
    path = os.environ.get("GRIDML_EXIT_FILE")
    if not path or code == 0:
        return
    try:
        old = int(open(path).read().strip() or 0)
    except (OSError, ValueError):
        old = 0
    if old not in (0, 1) or (old == 1 and code == 1):
        return
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        with open(tmp, "w") as fh:
            fh.write(f"{code}\n")
        os.replace(tmp, path)
    except OSError:
        pass


def main(argv: list[str] | None = None) -> int:
    code = _main(argv)
    record_exit_code(code)
    return code


def _start(cfg: TrialDoc, plan: threads.ThreadPlan) -> int:
    from payloads.runtime.torch_fit import run  # lazy: imports torch, after the thread setup

    return run(cfg, plan)


def _main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) == 1:
        die_with_launcher()
    return run_payload(argv, rank=int(os.environ.get("RANK", 0)), framework="torch",
                       usage="torchrun --nproc-per-node N -m payloads.train_torch TRIAL.json",
                       start=_start)


if __name__ == "__main__":
    raise SystemExit(main())
