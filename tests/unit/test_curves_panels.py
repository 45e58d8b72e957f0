"""curves.png: one panel per trained metric (train and validation together), none for the
model's costs, which every epoch report repeats unchanged."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from payloads.runtime import outputs

pytest.importorskip("matplotlib")


def _width(png: Path) -> int:
    return struct.unpack(">I", png.read_bytes()[16:20])[0]  # IHDR width


def test_the_costs_get_no_panel(tmp_path: Path) -> None:
    costs = {"n_params": 7269.0, "model_mb": 0.03, "inference_ms": 0.006}
    reports = [{"epoch": e, "metrics": {"loss": 1 / e, "val_loss": 2 / e, "auc": 0.5 + e / 10,
                                         "val_auc": 0.6, **costs}} for e in (1, 2)]
    plain = [{**r, "metrics": {k: v for k, v in r["metrics"].items() if k not in costs}}
             for r in reports]
    with_costs = outputs.plot_curves(reports, tmp_path / "a.png", "t")
    without = outputs.plot_curves(plain, tmp_path / "b.png", "t")
    assert with_costs is not None and without is not None
    assert _width(with_costs) == _width(without)  # two panels (auc, loss) in both
