"""Reading inputs: ROOT TTrees (uproot + awkward, jagged branches) and HDF5 column groups.

Every reader answers two questions: ``describe(path, tree)`` -> (entries, schema) and
``read(path, tree, branches, start, stop)`` -> an awkward Array of records, one per event.
uproot, awkward and h5py are imported here only, inside the functions.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gridml.errors import DataError
from gridml.extras import require

ROOT_SUFFIXES = (".root",)
HDF5_SUFFIXES = (".h5", ".hdf5", ".hdf")


def one_line(exc: BaseException) -> str:
    """``Type: message`` on one line (foreign messages often span several)."""
    return f"{type(exc).__name__}: {' '.join(str(exc).split())}"


def kind_of(path: Path, fmt: str) -> str:
    """'root' or 'hdf5' from the spec's format, or from the file suffix when it says auto."""
    if fmt != "auto":
        return fmt
    suffix = path.suffix.lower()
    if suffix in ROOT_SUFFIXES:
        return "root"
    if suffix in HDF5_SUFFIXES:
        return "hdf5"
    raise DataError(f"{path}: cannot tell ROOT from HDF5 by its suffix {suffix!r}",
                    hint="name it .root/.h5, or set inputs.format: root|hdf5 in the spec")


def describe(path: Path, kind: str, tree: str) -> tuple[int, dict[str, str]]:
    """(number of events, {column: type}) of one input file; unreadable file -> DataError."""
    try:
        return _describe_root(path, tree) if kind == "root" else _describe_hdf5(path, tree)
    except DataError:
        raise
    except Exception as exc:  # uproot/h5py raise many kinds; all mean "this file is bad"
        raise DataError(f"{path}: cannot read as {kind.upper()} ({one_line(exc)}): the file is "
                        "corrupt or truncated") from None


def _describe_root(path: Path, tree: str) -> tuple[int, dict[str, str]]:
    uproot = require("uproot", "prepare", feature="reading ROOT files", error=DataError)

    with uproot.open(path) as fh:
        if tree not in fh:
            names = sorted({k.split(";")[0] for k in fh.keys()})
            raise DataError(f"{path}: no TTree {tree!r} (found {names})",
                            hint="set inputs.tree to one of those")
        ttree = fh[tree]
        return int(ttree.num_entries), {k: str(ttree[k].typename) for k in ttree.keys()}


def _describe_hdf5(path: Path, group: str) -> tuple[int, dict[str, str]]:
    import h5py

    with h5py.File(path, "r") as fh:
        grp = fh.get(group, fh)
        cols = {k: v for k, v in grp.items() if isinstance(v, h5py.Dataset)}
        if not cols:
            raise DataError(f"{path}: no datasets in group {grp.name!r}",
                            hint="set inputs.tree to the group holding one dataset per column")
        lengths = {len(v) for v in cols.values()}
        if len(lengths) != 1:
            raise DataError(f"{path}: columns have different lengths {sorted(lengths)}",
                            hint="every dataset in the group must have one row per event")
        return lengths.pop(), {k: f"{v.dtype}{list(v.shape[1:])}" for k, v in cols.items()}


def read(path: Path, kind: str, tree: str, branches: list[str] | None,
         start: int, stop: int) -> Any:
    """Events [start, stop) of one file as an awkward Array of records."""
    if kind == "root":
        uproot = require("uproot", "prepare", feature="reading ROOT files", error=DataError)
        with uproot.open(path) as fh:
            return fh[tree].arrays(branches, entry_start=start, entry_stop=stop, library="ak")
    ak = require("awkward", "prepare", feature="gridml prepare", error=DataError)
    import h5py

    with h5py.File(path, "r") as fh:
        grp = fh.get(tree, fh)
        names = branches or [k for k, v in grp.items() if isinstance(v, h5py.Dataset)]
        return ak.Array({name: grp[name][start:stop] for name in names})
