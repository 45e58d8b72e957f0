"""Link the quark/gluon ROOT file that scikit-hep-testdata 0.2.0 ships (inside its package) as
examples/physics/data/uproot-issue96.root, where prepare.yaml reads it.

    python examples/physics/link_data.py [DIR]     # DIR: where prepare.yaml is (default: here)
"""

from __future__ import annotations

import sys
from pathlib import Path


def link(where: Path) -> Path:
    import skhep_testdata  # pip install scikit-hep-testdata==0.2.0 (the project's setup does)

    src = Path(skhep_testdata.__file__).parent / "data" / "uproot-issue96.root"
    dst = where / "data" / src.name
    dst.parent.mkdir(parents=True, exist_ok=True)
    if not dst.exists():
        dst.symlink_to(src)
    return dst


if __name__ == "__main__":
    print(link(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parent))
