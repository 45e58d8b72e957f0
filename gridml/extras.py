"""Optional packages and the extras that bring them: a missing one is told in one line.

gridml's own dependencies are what every command needs; a feature that needs more imports it
through :func:`require`, which names the ``pip install 'gridml[EXTRA]'`` to run instead of a
traceback (or a misleading message, e.g. "corrupt or truncated" for a ROOT file when uproot is
missing). The extras are declared in pyproject.toml ([project.optional-dependencies]):

    torch    torch, onnx, onnxruntime        the PyTorch payload (framework: torch)
    keras    tensorflow-cpu 2.15.1, tf2onnx  the Keras payload (Horovod is built separately)
    grid     panda-client, rucio-clients     backend.executor: panda/phpo, backend.data: rucio
    server   psycopg[binary], uvloop         PostgreSQL stores, the fast event loop for serve
    prepare  uproot, awkward                 `gridml prepare` (ROOT ntuples, jagged branches)
    all      every one of the above
"""

from __future__ import annotations

import importlib
from types import ModuleType

from gridml.errors import GridmlError

# the distribution that provides each optional top-level module, and the extra that declares it
PROVIDERS: dict[str, tuple[str, str]] = {
    "uproot": ("uproot", "prepare"),
    "awkward": ("awkward", "prepare"),
    "rucio": ("rucio-clients", "grid"),
    "pandaclient": ("panda-client", "grid"),
    "psycopg": ("psycopg", "server"),
    "uvloop": ("uvloop", "server"),
    "torch": ("torch", "torch"),
    "onnx": ("onnx", "torch"),
    "onnxruntime": ("onnxruntime", "torch"),
    "tensorflow": ("tensorflow-cpu", "keras"),
    "tf2onnx": ("tf2onnx", "keras"),
}


def install_hint(module: str, extra: str | None = None) -> str:
    """``pip install 'gridml[EXTRA]'`` for the extra that brings ``module``."""
    top = module.split(".")[0]
    extra = extra or PROVIDERS.get(top, (top, "all"))[1]
    return f"pip install 'gridml[{extra}]'"


def missing_message(module: str, extra: str | None = None, feature: str | None = None) -> str:
    """The one line a user reads when ``module`` is not installed."""
    top = module.split(".")[0]
    dist = PROVIDERS.get(top, (top, ""))[0]
    what = f"{feature} needs" if feature else "needs"
    return f"{what} {dist}, which is not installed: {install_hint(module, extra)}"


def require(module: str, extra: str | None = None, *, feature: str | None = None,
            error: type[GridmlError] = GridmlError) -> ModuleType:
    """Import ``module``; when it (not something it imports) is missing, raise ``error`` whose
    message names the extra to install. ``feature`` says what needed it ("gridml prepare")."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        missing = getattr(exc, "name", None) or ""
        ours = not missing or module == missing or module.startswith(missing + ".")
        if not ours:  # the package is there but broken inside: that is not a missing extra
            raise
        raise error(missing_message(module, extra, feature)) from None


def available(module: str) -> bool:
    """Whether ``module`` can be imported (without importing more than its spec lookup)."""
    import importlib.util

    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False
