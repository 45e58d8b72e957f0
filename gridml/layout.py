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
from here (gridml/report.py still spells ``convergence.png`` itself).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

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
