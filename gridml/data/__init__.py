"""Data management: DIDs, datasets, stage-in and outputs (local store or Rucio).

``open_data_manager(backend)`` is the one place that chooses a backend; see
:mod:`gridml.data.base` for the seam and ``docs/data.md`` for the CLI (``gridml data``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gridml.errors import UsageError
from gridml.settings import settings

if TYPE_CHECKING:
    from gridml.data.base import DataManager

BACKENDS = ("local", "rucio")


def open_data_manager(backend: str | None = None, *, rse: str | None = None,
                      lifetime: int | None = None) -> DataManager:
    """The DataManager for ``backend`` (``local`` | ``rucio``); None means the setting
    ($GRIDML_DATA_BACKEND, default ``local``). The local store lives in settings().store_dir;
    Rucio reads its own configuration (RUCIO_CONFIG / rucio.cfg, RUCIO_ACCOUNT).

    Rucio only: ``rse`` is the RSE uploads go to (default $GRIDML_RUCIO_RSE) and ``lifetime``
    (seconds) that of the rule made with a new dataset (default $GRIDML_RUCIO_LIFETIME, none).
    The local store has one RSE and keeps everything."""

    name = (backend or settings().data_backend).strip().lower()
    if name == "local":
        from gridml.data.local import LocalStore  # lazy: only the chosen backend is imported

        return LocalStore(settings().store_dir)
    if name == "rucio":
        from gridml.data.rucio import RucioStore  # lazy: rucio-clients only when chosen

        return RucioStore(rse=rse, lifetime=lifetime)
    raise UsageError(f"unknown data backend {name!r}",
                     hint=f"use one of: {', '.join(BACKENDS)} (--backend or $GRIDML_DATA_BACKEND)")
