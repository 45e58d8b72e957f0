"""The training spec's typed models: they live in :mod:`gridml.specmodel` (below the store and
the searchers, so a stored study's spec is read typed); re-exported here for the callers, every
name of ``gridml.specmodel.__all__`` and no list of them to keep in step."""

from __future__ import annotations

from gridml.specmodel import *  # noqa: F403
from gridml.specmodel import __all__ as __all__
