"""The user's model file, imported by path (both frameworks): its module and ``build_model``."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from payloads.runtime.errors import PayloadFailure


def import_model_file(path: Path) -> tuple[ModuleType, Callable[..., Any]]:
    """(the module, its ``build_model``); a missing, broken or incomplete file is exit code 2."""
    if not path.is_file():
        raise PayloadFailure(f"model file {path} does not exist", code=2)
    spec = importlib.util.spec_from_file_location(f"gridml_user_model_{path.stem}", path)
    if spec is None or spec.loader is None:
        raise PayloadFailure(f"model file {path} cannot be imported (not a .py file?)", code=2)
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as e:
        raise PayloadFailure(f"model file {path} failed to import: {type(e).__name__}: {e}",
                             code=2) from e
    fn = getattr(module, "build_model", None)
    if not callable(fn):
        raise PayloadFailure(f"model file {path} defines no build_model(hparams, input_shape)",
                             code=2)
    return module, fn
