"""Sample data for the quickstart: toy hadronic taus vs quark/gluon jets, as HDF5.

The generator ships inside gridml (gridml/demo.py, the `gridml demo-data` command); this script
is the same entry point for a clone, and the tests import ``make_sample_data`` from here.

    python examples/make_sample_data.py --out data/ --n-train 60000 --n-val 15000 --files 3
"""

from __future__ import annotations

from gridml.demo import (  # noqa: F401  (re-exported for tests and examples)
    CHUNK_ROWS,
    FEATURES,
    main,
    make_events,
    make_sample_data,
    make_tracks,
    write_h5,
)

if __name__ == "__main__":
    raise SystemExit(main())
