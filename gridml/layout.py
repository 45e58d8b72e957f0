"""Where a campaign's state files lie beside the store: every name in one place.

    runs/                               RunsLayout(settings().runs_dir)
    ├── .journal/<executor>/            executors' own journals (a handle -> what polling it needs)
    ├── <study>-scale/                  `gridml scale`: scaling.json, scaling.png
    └── <study>/                        StudyPaths
        ├── api.json                    the embedded API's URL, port and study token (0600)
        ├── controller.log              the controller's log (`gridml submit` / `resume`)
        ├── convergence.png             the study's convergence plot
        ├── inputs/                     staged input files (local and Slurm runs)
        ├── live.json                   the live channel's spool offsets (gridml/live.py)
        ├── model/                      a model sent by a remote `gridml submit` (the server's copy)
        ├── phpo/                       the study's phpo task: panda.json, sandbox/, evaluations/
        └── trial-NNNN/                 one trial: trial.json, outputs/ (metrics.jsonl spool),
                                        attempt-N/, interrupted, panda.json or slurm.json,
                                        progress.json and decision.json (the live channel)

The CLI, the runner, the controller, the server's controller and the executors take these paths
from here (gridml/report.py still spells ``convergence.png`` itself). The output paths a user
names (``fetch -o``, ``steer --out`` ...) are checked here too (:func:`writable_file`,
:func:`writable_folder`).
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from gridml.errors import UsageError

JOURNALS = ".journal"
PANDA_JOURNAL = "panda.json"  # in a trial's (or the phpo task's) folder: its PanDA task
SLURM_JOURNAL = "slurm.json"  # in a trial's folder: its Slurm job per attempt
SANDBOX = "sandbox"  # in a PanDA trial's (or phpo task's) folder: the uploaded code tarball


@dataclass(frozen=True)
class StudyPaths:
    """The state files of one study, under ``runs/<study>/``."""

    root: Path

    @property
    def name(self) -> str:
        return self.root.name

    @property
    def api_record(self) -> Path:
        return self.root / "api.json"

    @property
    def controller_log(self) -> Path:
        return self.root / "controller.log"

    @property
    def convergence_plot(self) -> Path:
        return self.root / "convergence.png"

    @property
    def importance(self) -> Path:
        """The last fANOVA shares and the key of the trials they came from (a cache)."""
        return self.root / "importance.json"

    @property
    def inputs(self) -> Path:
        return self.root / "inputs"

    @property
    def model_dir(self) -> Path:
        return self.root / "model"

    @property
    def phpo(self) -> Path:
        """The study's phpo task folder (its journal, sandbox and evaluations)."""
        return self.root / "phpo"

    @property
    def phpo_evaluations(self) -> Path:
        return self.phpo / "evaluations"

    def trial(self, number: int) -> Path:
        return self.root / f"trial-{number:04d}"

    def trial_outputs(self, number: int) -> Path:
        return self.trial(number) / "outputs"

    @property
    def live_state(self) -> Path:
        """The live channel's byte offsets in the running trials' spools (gridml/live.py)."""
        return self.root / "live.json"

    def progress(self, number: int) -> Path:
        """The payload's progress (epoch, batches), replaced by rename (payloads/runtime/channel.py)."""
        return self.trial(number) / "progress.json"

    def decision(self, number: int) -> Path:
        """The controller's early-stopping decision for the payload (payloads/runtime/channel.py)."""
        return self.trial(number) / "decision.json"

    def interrupted(self, number: int) -> Path:
        """How many of the trial's attempts were interrupted (Ctrl-C, lost node): free retries."""
        return self.trial(number) / "interrupted"


@dataclass(frozen=True)
class RunsLayout:
    """The runs folder (``$GRIDML_HOME/runs``): studies and the executors' journals."""

    runs_dir: Path

    def study(self, name: str) -> StudyPaths:
        return StudyPaths(self.runs_dir / name)

    def journal(self, executor: str) -> Path:
        """The journal folder of executor ``executor`` (shared by every study it runs)."""
        return self.runs_dir / JOURNALS / executor

    def scaling(self, name: str) -> Path:
        """`gridml scale`'s folder for spec ``name``."""
        return self.runs_dir / f"{name}-scale"


# ---- paths the user names for output ------------------------------------------------------------
# Checked before anything is done (a download, a training): a folder where a file goes, a file
# where a folder goes, a folder that does not exist or cannot be written is one line naming the
# path and the fix, never a traceback after the work (issue 24).
def _nearest_folder(path: Path) -> Path:
    for parent in (path, *path.parents):
        if parent.exists():
            return parent
    return Path(".")


def _probe(folder: Path, path: Path, what: str) -> None:
    """Can a file be created in ``folder`` (the folder of ``path``)? Tried, not guessed: a
    read-only file system and root's bypass of file modes both show as they are."""
    try:
        fd, tmp = tempfile.mkstemp(prefix=".gridml-probe-", dir=folder)
    except OSError as exc:
        raise UsageError(f"{path}: {what} cannot be written in {folder} "
                         f"({exc.strerror or exc})", hint="give a path in a writable folder") from None
    os.close(fd)
    os.unlink(tmp)


def writable_file(path: Path, what: str, *, example: str = "out.json") -> Path:
    """``path`` can be written as a file (``what``: how the user knows it, e.g. ``--out``)."""
    path = Path(path)
    if path.is_dir():
        raise UsageError(f"{path}: {what} is a folder, and a file goes there",
                         hint=f"give a file name, e.g. {path / example}")
    folder = path.parent if str(path.parent) else Path(".")
    if not folder.is_dir():
        raise UsageError(f"{path}: {what}: the folder {folder} does not exist",
                         hint=f"create it (mkdir -p {folder}) or give another path")
    _probe(folder, path, what)
    return path


def writable_folder(path: Path, what: str) -> Path:
    """``path`` is (or can be made) a folder that files can be written into; an existing
    file there is refused (never overwritten)."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise UsageError(f"{path}: {what} is an existing file, and a folder goes there",
                         hint="give a folder (new or existing); the file is left as it is")
    nearest = _nearest_folder(path)
    if not nearest.is_dir():
        raise UsageError(f"{path}: {what}: {nearest} is a file, not a folder",
                         hint="give a folder path")
    _probe(nearest, path, what)
    return path
