"""iDDS, played in small, for a phpo task (``hpoWorkflow``): steering and evaluation jobs.

What iDDS and JEDI do with an HPO task, in small: run the task's steering command
(``hpoRequestData.arguments``, e.g. ``gridml steer --in %IN --out %OUT --num-points %NUM_POINTS
--max-points %MAX_POINTS ...``) for real, in a fresh folder each step, with ``%IN`` holding every
point so far (``{"points": [[{hp}, loss | null], ...], "opt_space": ...}``: null while it is being
evaluated, NaN when its evaluation failed), read the new points from ``%OUT``, and run one
evaluation job per point (:func:`tests.panda_double.pilot.run_hpo`: runHPO's part, the job's
exec is the task's evaluation command) with at most ``nEvents`` jobs at a time
(``--nParallelEvaluation``). It steers again whenever a slot is free and something changed, until
``max_points`` points were proposed or the steering proposes nothing, then ends the task: done
when every evaluation succeeded, finished when some did, failed when none did (or when the
steering command failed). A kill stops the steering; JEDI aborts the running jobs.
"""

from __future__ import annotations

import json
import math
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

from tests.panda_double import pilot


def steering_command(hpo: dict[str, Any], in_path: Path, out_path: Path, num: int) -> str:
    return (str(hpo["arguments"]).replace("%IN", str(in_path)).replace("%OUT", str(out_path))
            .replace("%NUM_POINTS", str(num)).replace("%MAX_POINTS", str(int(hpo["max_points"]))))


def run(jedi: Any, task: Any) -> None:
    """Drive the HPO task to its end (a thread per task; JEDI's loop only watches)."""
    hpo = task.params["hpoRequestData"]
    max_points = int(hpo["max_points"])
    per_step = int(hpo.get("num_points_per_generation") or 1)
    parallel = int(task.params.get("nEvents") or per_step)
    root = jedi.workroot / str(task.task_id) / "idds"
    root.mkdir(parents=True, exist_ok=True)
    points: list[list[Any]] = []  # [point, loss | None]
    running: dict[int, tuple[pilot.Job, int]] = {}
    changed, steps = True, 0
    task.idds_points = points
    while not jedi.stopped():
        if task.status in ("aborting", "aborted"):
            return
        for pid, (job, index) in list(running.items()):
            if job.status in ("finished", "failed", "cancelled"):
                result = job.result or {}
                loss = result.get("loss") if result.get("status") == 0 else None
                points[index][1] = float(loss) if isinstance(loss, int | float) else math.nan
                running.pop(pid)
                changed = True
        free = parallel - len(running)
        if free > 0 and changed and len(points) < max_points:
            steps += 1
            new = _steer(jedi, task, hpo, points, root / f"step-{steps:03d}", min(per_step, free))
            if new is None:
                return _end(jedi, task, "failed")
            changed = bool(new)
            for point in new:
                points.append([point, None])
                job = jedi.start_hpo_job(task, point)
                running[job.panda_id] = (job, len(points) - 1)
        if not running and (len(points) >= max_points or not changed):
            ok = sum(1 for _, loss in points if loss is not None and math.isfinite(loss))
            return _end(jedi, task, "done" if ok == len(points) and ok else
                        "finished" if ok else "failed")
        time.sleep(jedi.tick_s)


def _steer(jedi: Any, task: Any, hpo: dict[str, Any], points: list[list[Any]], folder: Path,
           num: int) -> list[Any] | None:
    """One steering step in a fresh folder: the new points, or None when the command failed."""
    folder.mkdir(parents=True, exist_ok=True)
    in_path, out_path = folder / "in.json", folder / "out.json"
    in_path.write_text(json.dumps({"points": points, "opt_space": hpo["opt_space"]}))
    cmd = steering_command(hpo, in_path, out_path, num)
    proc = subprocess.run(["/bin/sh", "-c", cmd], cwd=folder, env=jedi.env, capture_output=True,
                          text=True, timeout=300, check=False)
    (folder / "steering.log").write_text(proc.stdout + proc.stderr)
    if proc.returncode != 0 or not out_path.is_file():
        task.error = f"steering failed (exit {proc.returncode}): {proc.stderr.strip()[-300:]}"
        return None
    return list(json.loads(out_path.read_text()))


def _end(jedi: Any, task: Any, status: str) -> None:
    with jedi.lock:
        if task.status == "running" and not task.command:
            task.set(status)


def start(jedi: Any, task: Any) -> None:
    threading.Thread(target=run, args=(jedi, task), name=f"idds-{task.task_id}",
                     daemon=True).start()
