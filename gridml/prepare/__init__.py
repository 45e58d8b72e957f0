"""``gridml prepare``: preprocess raw HEP data (ROOT or HDF5) once, in parallel and cached, into
the HDF5 training shards the payload reads. See docs/prepare.md.

Python API::

    from gridml.prepare import run_prepare, load_prep_spec
    result = run_prepare("prep.yaml", jobs=0, dataset="user.demo:taus")   # -> PrepareResult
"""

from __future__ import annotations

from typing import Any

__all__ = ["PrepareError", "PrepareResult", "json_schema", "load_prep_spec", "run_prepare"]


def __getattr__(name: str) -> Any:  # lazy: `gridml --help` must not import numpy
    if name == "run_prepare":
        from gridml.prepare import runner

        return runner.run_prepare
    if name in ("PrepareResult", "PrepareError"):
        from gridml.prepare import result

        return getattr(result, name)
    if name in ("load_prep_spec", "json_schema"):
        from gridml.prepare import spec

        return getattr(spec, name)
    raise AttributeError(name)
