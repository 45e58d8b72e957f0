"""What every payload's ``main`` does, once: read the trial file, size the thread pools before the
framework is imported, run, and turn every failure into an exit code with its reason as the last
line on stderr (``gridml payload error: ...``), which the executors report."""

from __future__ import annotations

import faulthandler
import logging
import os
import signal
import sys
import traceback
from collections.abc import Callable

from payloads.runtime import channel, threads
from payloads.runtime.errors import PayloadFailure
from payloads.runtime.trial import TrialDoc, load_trial


def run_payload(argv: list[str], *, usage: str, rank: int, framework: str,
                start: Callable[[TrialDoc, threads.ThreadPlan], int]) -> int:
    """``start(cfg, plan)`` imports the framework and trains (after the thread setup here).
    Exit codes: 0 done, 1 training failed, 2 bad trial/model file, 3 bad data, 130 interrupted."""
    if len(argv) != 1:
        print(f"usage: {usage}", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format=f"%(asctime)s [payload r{rank}] %(message)s", datefmt="%H:%M:%S")
    # a stalled trial's controller sends SIGUSR2 before killing it: every thread's stack goes to
    # the log (gridml/live.py); the payload goes on running
    if hasattr(signal, "SIGUSR2"):
        faulthandler.register(signal.SIGUSR2, file=sys.stderr, all_threads=True)
    try:
        cfg = load_trial(argv[0])
        channel.watch_dump_requests(cfg.output_dir.parent)  # a stalled trial's stacks (live.py)
        if cfg.training.framework != framework:
            raise PayloadFailure(f"{cfg.path}: training.framework is {cfg.training.framework!r}; "
                                 f"this is the {framework} payload "
                                 f"(run payloads.train_{cfg.training.framework})", code=2)
        plan = threads.plan_threads(cfg.cores, threads.local_ranks())
        threads.apply_env(plan)  # OMP/MKL/TF pools before the framework is imported anywhere
        code = start(cfg, plan)
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
    if code == 0 and os.environ.get(LAUNCHED_BY.get(framework, "")) is not None \
            and _left_horovod():
        exit_now(code)
    return code


# the variable each framework's launcher sets in its ranks (torchrun; horovodrun)
LAUNCHED_BY = {"torch": "TORCHELASTIC_RUN_ID", "keras": "HOROVOD_RANK"}


def _left_horovod() -> bool:
    """Horovod shut down on this rank (what its exit hook would do: every rank waits there for
    the others), or never started here; False if the shutdown failed (the normal exit then)."""
    hvd = sys.modules.get("horovod.tensorflow")
    if hvd is None:
        return True
    try:
        hvd.shutdown()
    except Exception:  # (its own exit hook tries again)
        return False
    return True


def exit_now(code: int) -> None:
    """End a launched rank that finished (its outputs written, its process group destroyed or
    Horovod shut down) without the interpreter's teardown: freeing torch's or TensorFlow's
    modules and memory, and their exit hooks, took 2-3 s of every trial after result.json on a
    CPU node. Logs and stdio are flushed first; a failing rank never comes here (its code goes
    to $GRIDML_EXIT_FILE on the way out)."""
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)

