"""Local executor: each trial is its own process group on this machine.

The payload runs detached (its own session) under a small shell wrapper that records its exit
code in ``<workdir>/exit_code``; ``<workdir>/pid`` names the group. So a controller that crashed
and restarted re-attaches to trials still running, and ``submit`` is idempotent per attempt: it
never starts a trial twice.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

from gridml.errors import ExecutorError
from gridml.executors import container
from gridml.executors.base import TaskRequest, TaskStatus
from gridml.executors.failures import deterministic
from gridml.executors.gpus import GpuSlots, visible_gpus
from gridml.executors.logs import exit_message, tail
from gridml.planner import local_payload_command
from payloads.runtime import threads
from payloads.runtime.errors import CONTINUE_CODE

# torchrun exits 1 whatever its rank's code: the torch payload writes its own code (2 bad trial or
# model file, 3 bad data, ...) to $GRIDML_EXIT_FILE, which then stands for the launcher's
_WRAPPER = ('rm -f payload_exit_code; "$@"; code=$?; '
            'if [ $code -ne 0 ] && [ -s payload_exit_code ]; then read -r c < payload_exit_code; '
            'case "$c" in ""|*[!0-9]*) ;; *) code=$c;; esac; fi; '
            'echo $code > exit_code.tmp && mv exit_code.tmp exit_code; exit $code')


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie child of ours is dead too
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(") ", 1)[1][0] != "Z"
    except OSError:
        return False


def _finished_here(run: Path) -> bool:
    """The attempt in ``run`` wrote ``result.json`` (the payload's last act, after its model),
    stating a finished training: written after this attempt started (an earlier attempt's is
    removed by the payload when it starts)."""
    result = run.parent / "outputs" / "result.json"
    try:
        doc = json.loads(result.read_text())
        return (isinstance(doc, dict) and doc.get("state") in ("completed", "pruned", "diverged")
                and result.stat().st_mtime >= (run / "pid").stat().st_mtime)
    except (OSError, ValueError):
        return False


def _leaves(root: int) -> list[int]:
    """The descendants of ``root`` that have no child (the ranks: torchrun starts them in
    sessions of their own), from Linux's /proc; elsewhere ``root`` itself."""
    children: dict[int, list[int]] = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return [root]
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as fh:
                fields = fh.read().rsplit(") ", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[0] != "Z":
            children.setdefault(int(fields[1]), []).append(int(name))
    leaves, todo = [], list(children.get(root, []))
    while todo:
        pid = todo.pop()
        if children.get(pid):
            todo.extend(children[pid])
        else:
            leaves.append(pid)
    return leaves or [root]


class LocalExecutor:
    name = "local"
    remote = False
    watch_heartbeats = True  # a local trial silent past backend.heartbeat_timeout is hung
    # the controller's cycle (Campaign.poll_s): a poll here reads a few files of this machine, so
    # a finished trial's slot is refilled within 0.5 s (2 s, the default, cost ~1 s a trial)
    poll_s = 0.5

    def __init__(self, grace_s: float = 10.0) -> None:
        self.grace_s = grace_s
        self._children: dict[str, subprocess.Popen[bytes]] = {}
        self._slots: GpuSlots | None = None  # found at the first trial that asks for GPUs

    def _gpus_for(self, req: TaskRequest, run: Path) -> list[str]:
        """The GPUs this attempt gets (gridml/executors/gpus.py), recorded in ``run/gpus`` so a
        restarted controller knows they are taken; [] for a CPU trial or a machine without."""
        if req.gpus <= 0:
            return []
        if self._slots is None:
            self._slots = GpuSlots(visible_gpus())
        ids = self._slots.take(str(run), req.gpus)
        if ids:
            (run / "gpus").write_text(",".join(ids))
        return ids

    def _attempt_dir(self, req: TaskRequest) -> Path:
        return req.workdir / f"attempt-{req.attempt}"

    def submit(self, req: TaskRequest) -> str:
        run = self._attempt_dir(req)
        pidfile = run / "pid"
        if pidfile.exists():  # submitted before (controller restart): re-attach
            if (run / "gpus").exists():
                if self._slots is None:
                    self._slots = GpuSlots(visible_gpus())
                self._slots.hold(str(run), (run / "gpus").read_text().split(","))
            return str(run)
        run.mkdir(parents=True, exist_ok=True)
        # Horovod's 30 s defaults for rank start-up and Gloo rendezvous are too short when
        # TensorFlow imports on a busy node; users can still set their own.
        env = {"HOROVOD_START_TIMEOUT": "300", "HOROVOD_GLOO_TIMEOUT_SECONDS": "300",
               **os.environ, **req.env, "GRIDML_TRIAL_DIR": str(req.workdir),
               "GRIDML_EXIT_FILE": str(run / "payload_exit_code"),
               "GRIDML_ATTEMPT": str(req.attempt)}  # into progress.json (gridml/live.py)
        if req.workers > 1 and req.trial.training.framework == "torch":
            # the payload sizes each rank's pools (payloads/runtime/threads.py); said to torchrun
            # too, which otherwise prints a banner that it set OMP_NUM_THREADS=1 "in default"
            env.setdefault("OMP_NUM_THREADS", str(threads.plan_threads(req.cores, req.workers).omp))
        gpus = self._gpus_for(req, run)
        if gpus:  # its own GPUs: parallel trials do not all train on GPU 0
            env["CUDA_VISIBLE_DEVICES"] = ",".join(gpus)
        env["PATH"] = f"{Path(local_payload_command(req)[0]).parent}:{env.get('PATH', '')}"
        command = local_payload_command(req)
        if req.container:  # resources.container: in the image (gridml/executors/container.py)
            command = container.wrap(req, env, run)
        with open(run / "payload.log", "ab") as log:
            try:
                proc = subprocess.Popen(["bash", "-c", _WRAPPER, "gridml-trial", *command],
                                        cwd=run, stdout=log, stderr=subprocess.STDOUT, env=env,
                                        stdin=subprocess.DEVNULL, start_new_session=True)
            except OSError as exc:
                raise ExecutorError(f"trial {req.trial_number}: cannot start the payload: {exc}",
                                    hint="is the environment built? run scripts/setup.sh") from None
        (run / "pid.tmp").write_text(str(proc.pid))
        (run / "pid.tmp").rename(pidfile)
        self._children[str(run)] = proc
        return str(run)

    def poll(self, handle: str) -> TaskStatus:
        status = self._poll(handle)
        if self._slots is not None and status.state != "running":
            self._slots.release(handle)  # its GPUs go to the next trial
        return status

    def _poll(self, handle: str) -> TaskStatus:
        run = Path(handle)
        child = self._children.get(handle)
        if child is not None:
            child.poll()  # reap, so the pid does not linger as a zombie
        code_file = run / "exit_code"
        if code_file.exists():
            code = int(code_file.read_text().strip() or 1)
            if code == 0:
                return TaskStatus("completed")
            log_tail = tail(run / "payload.log")
            # torchrun's summary (~40 lines) names the failed rank and its code or signal
            longer = tail(run / "payload.log", 100)
            if code == CONTINUE_CODE:  # checkpointed on SIGUSR1: continued, no retry used
                return TaskStatus("failed", "the trial checkpointed on SIGUSR1 and left to be "
                                  "continued", log_tail, continuation=True)
            return TaskStatus("failed", exit_message(code, longer), log_tail,
                              deterministic=deterministic(code, longer))
        pid = self._pid(run)
        if pid is not None and _alive(pid):
            return TaskStatus("running")
        if pid is None:
            return TaskStatus("unknown", "not started")
        time.sleep(0.2)  # the wrapper may be writing its exit code right now
        if code_file.exists():
            return self._poll(handle)
        if _finished_here(run):  # it wrote its final result, then its wrapper was lost
            return TaskStatus("completed", "the payload's process vanished after it wrote "
                              "result.json: its outputs are adopted")
        return TaskStatus("failed", "the payload's process vanished without an exit code",
                          tail(run / "payload.log"))

    def kill(self, handle: str) -> None:
        pid = self._pid(Path(handle))
        if pid is None:
            return
        for sig, wait in ((signal.SIGTERM, self.grace_s), (signal.SIGKILL, 2.0)):
            try:
                os.killpg(pid, sig)
            except (ProcessLookupError, PermissionError):
                return
            deadline = time.monotonic() + wait
            while time.monotonic() < deadline:
                child = self._children.get(handle)
                if child is not None:
                    child.poll()
                if not _alive(pid):
                    return
                time.sleep(0.1)

    def dump(self, handle: str) -> None:
        """SIGUSR2 to the trial's processes that start no other (its ranks, not the wrapper shell
        or the launcher, which it would end): each dumps its threads' stacks to the log
        (faulthandler, payloads/runtime/entry.py) and goes on; a stalled trial is killed next."""
        pid = self._pid(Path(handle))
        if pid is None:
            return
        for p in _leaves(pid):
            try:
                os.kill(p, signal.SIGUSR2)
            except (ProcessLookupError, PermissionError):
                pass

    def close(self) -> None:
        for handle in list(self._children):
            if self.poll(handle).state == "running":
                self.kill(handle)

    @staticmethod
    def _pid(run: Path) -> int | None:
        try:
            return int((run / "pid").read_text())
        except (OSError, ValueError):
            return None
