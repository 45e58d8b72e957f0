"""Which of this machine's GPUs a local trial gets.

The local executor runs ``search.parallel`` trials at once on one machine. Without this, every
trial that asks for ``resources.gpus`` sees every GPU and each rank takes ``local_rank % GPUs``:
four 1-GPU trials on a 4-GPU workstation all train on GPU 0. Here each trial is given its own
GPUs through ``CUDA_VISIBLE_DEVICES`` (what Slurm's ``--gpus-per-task`` and PanDA's pilot do on
their nodes), the least used first, so they share only when ``parallel x gpus`` exceeds the GPUs
there are. The GPUs are those ``CUDA_VISIBLE_DEVICES`` of the controller names, else those
``nvidia-smi -L`` lists; with none, the trial's ranks fall back to the CPU (payloads/runtime/gpu.py).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Mapping


def visible_gpus(env: Mapping[str, str] | None = None) -> list[str]:
    """The GPU ids this process may hand out: ``CUDA_VISIBLE_DEVICES`` as CUDA reads it (up to
    its first empty or negative entry), else one id per ``nvidia-smi -L`` line, else none."""
    env = os.environ if env is None else env
    listed = env.get("CUDA_VISIBLE_DEVICES")
    if listed is not None:
        ids = []
        for item in listed.split(","):
            item = item.strip()
            if not item or item.startswith("-"):
                break
            ids.append(item)
        return ids
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return []
    try:
        out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return []
    lines = [x for x in out.stdout.splitlines() if x.startswith("GPU ")]
    return [str(i) for i in range(len(lines))] if out.returncode == 0 else []


class GpuSlots:
    """The GPUs held by running trials, keyed by the executor's handle."""

    def __init__(self, gpus: list[str]) -> None:
        self.gpus = gpus
        self.held: dict[str, list[str]] = {}

    def take(self, handle: str, n: int) -> list[str]:
        """``n`` distinct GPUs for ``handle`` (all of them when ``n`` is larger), the least held
        first, ties in the machine's order; [] on a machine without GPUs."""
        load = {g: 0 for g in self.gpus}
        for ids in self.held.values():
            for g in ids:
                if g in load:
                    load[g] += 1
        order = sorted(self.gpus, key=lambda g: load[g])  # stable: ties keep the machine's order
        chosen = order[:max(0, n)]
        if chosen:
            self.held[handle] = chosen
        return chosen

    def hold(self, handle: str, ids: list[str]) -> None:
        """``handle`` holds ``ids`` already (a trial re-attached after a controller restart)."""
        if ids:
            self.held[handle] = ids

    def release(self, handle: str) -> None:
        self.held.pop(handle, None)
