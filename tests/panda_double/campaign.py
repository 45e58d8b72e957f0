"""Test helpers: a small registered data set, a PanDA spec, and a Campaign on the PanDA executor.

The Campaign is built the way ``gridml.runner.run_local`` builds it (store, data manager, runs
folder, optional embedded metrics API), with :class:`gridml.executors.panda.PandaExecutor`.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from tests.helpers import ROOT, write_spec

PANDA_SECTIONS = {
    "backend": "backend: {executor: panda, data: local, server: embedded, retries: 1}\n",
    "resources": "resources: {cores: 2, gpus: 0, memory_gb: 2, walltime: 20m}\n",
}


def register_sample_data(tmp: Path, scope: str = "user.test", n_train: int = 3000,
                         n_val: int = 800, files: int = 2) -> tuple[str, str]:
    """Toy HDF5 files from the example generator, put into the local store as two datasets."""
    sys.path.insert(0, str(ROOT / "examples"))
    from make_sample_data import make_sample_data  # type: ignore[import-not-found]

    from gridml.data import open_data_manager

    train, val = make_sample_data(tmp / "data", n_train=n_train, n_val=n_val, n_files=files, seed=3)
    store = open_data_manager("local")
    store.upload([Path(p) for p in train], f"{scope}:toy.train")
    store.upload([Path(p) for p in val], f"{scope}:toy.val")
    return f"{scope}:toy.train", f"{scope}:toy.val"


def panda_spec(tmp: Path, name: str, train: str, val: str, **sections: str) -> Path:
    return write_spec(tmp / f"{name}.yaml", name, train, val, **{**PANDA_SECTIONS, **sections})


def make_campaign(spec: Path, *, api_url: str | None = None, executor: Any = None,
                  poll_s: float = 0.5) -> Any:
    """A Campaign for ``spec`` on the PanDA executor, its state under $GRIDML_HOME."""
    from gridml.controller import Campaign
    from gridml.data import open_data_manager
    from gridml.store import open_store
    from gridml.settings import settings
    from gridml.spec import load_spec

    loaded = load_spec(spec)
    cfg = settings()
    data = open_data_manager(loaded.spec.backend.data)
    return Campaign(loaded, open_store(cfg.db_url), executor or panda_executor(data),
                    data, cfg.runs_dir, api_url=api_url, poll_s=poll_s)


def panda_executor(data: Any = None) -> Any:
    """A PanDA executor as a campaign under $GRIDML_HOME gets it (a fresh one: a restarted
    controller, reading its journal)."""
    from gridml import executors
    from gridml.data import open_data_manager
    from gridml.settings import settings

    return executors.create("panda", data=data or open_data_manager("local"),
                            journal=settings().runs_dir / ".journal" / "panda")
