"""The Gaussian process's view of a point, as scikit-optimize builds it.

Real and int parameters become one column each, normalised to [0, 1] on their (log) scale;
a categorical becomes one one-hot column per choice. A conditional parameter that does not exist
in a point is imputed with a constant outside the cube (numbers: -0.5, categoricals: all zeros), so
the kernel keeps points with and without it apart. ``snap`` maps any relaxed feature rows back to
valid points (rounding ints, arg-max of one-hot blocks, conditions applied).
"""

from __future__ import annotations

import math

import numpy as np

from gridml.search.params import Param
from gridml.search.space import Columns, Space

INACTIVE = -0.5


class Encoder:
    def __init__(self, space: Space) -> None:
        self.space = space
        self.blocks: dict[str, slice] = {}
        start = 0
        for p in space.params:
            width = len(p.choices) if p.type == "categorical" else 1
            self.blocks[p.name] = slice(start, start + width)
            start += width
        self.width = start

    def encode(self, cols: Columns) -> np.ndarray:
        """Feature rows (m x width) of columns."""
        out = np.zeros((len(cols), self.width))
        for p in self.space.params:
            block, act = out[:, self.blocks[p.name]], cols.active[p.name]
            vals = cols.values[p.name]
            if p.type == "categorical":
                block[np.flatnonzero(act), vals[act]] = 1.0
            else:
                block[:, 0] = np.where(act, _normalise(p, np.where(act, vals, p.low)), INACTIVE)
        return out

    def snap(self, feats: np.ndarray) -> Columns:
        """The valid points nearest to relaxed feature rows."""
        values = {}
        for p in self.space.params:
            block = feats[:, self.blocks[p.name]]
            if p.type == "categorical":
                values[p.name] = np.argmax(block, axis=1)
            else:
                values[p.name] = _denormalise(p, np.clip(block[:, 0], 0.0, 1.0))
        return Columns(values, self.space.activity(values))

    def unit_to_features(self, u: np.ndarray) -> np.ndarray:
        return self.encode(self.space.from_unit(u))


def _scale(p: Param) -> tuple[float, float]:
    return (math.log10(p.low), math.log10(p.high)) if p.log else (p.low, p.high)


def _normalise(p: Param, v: np.ndarray) -> np.ndarray:
    lo, hi = _scale(p)
    t = np.log10(np.maximum(v, p.low)) if p.log else v
    return np.clip((t - lo) / (hi - lo), 0.0, 1.0)


def _denormalise(p: Param, f: np.ndarray) -> np.ndarray:
    lo, hi = _scale(p)
    t = lo + f * (hi - lo)
    v = np.clip(10.0**t if p.log else t, p.low, p.high)
    return np.round(v) if p.type == "int" else v
