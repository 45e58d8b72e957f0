"""Sample data for the quickstart: toy hadronic taus vs quark/gluon jets, as HDF5.

The generator ships inside gridml (gridml/demo.py, the `gridml demo-data` command); this script
is the same entry point for a clone, and the tests import ``make_sample_data`` from here.
Where gridml's package cannot be imported (a GPU node with only torch, h5py and numpy, as
benchmarks/torch_gpu.py runs), the same module is loaded by its path: it needs only numpy and h5py.

    python examples/make_sample_data.py --out data/ --n-train 60000 --n-val 15000 --files 3
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType


def _demo() -> ModuleType:
    try:
        import gridml.demo

        return gridml.demo
    except ImportError:
        path = Path(__file__).resolve().parents[1] / "gridml" / "demo.py"
        spec = importlib.util.spec_from_file_location("gridml_demo_standalone", path)
        assert spec is not None and spec.loader is not None, path
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module


_mod = _demo()
CHUNK_ROWS = _mod.CHUNK_ROWS
FEATURES = _mod.FEATURES
main = _mod.main
make_events = _mod.make_events
make_sample_data = _mod.make_sample_data
make_tracks = _mod.make_tracks
write_h5 = _mod.write_h5

if __name__ == "__main__":
    raise SystemExit(main())
