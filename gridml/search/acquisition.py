"""One batch of Bayesian proposals: fitted kernel, constant liar, bounded EI maximisation."""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from gridml.search.base import Point
from gridml.search.features import Encoder
from gridml.search.gp import Posterior, expected_improvement, fit_kernel
from gridml.search.space import Space

RADII = (0.1, 0.03, 0.01, 0.003)  # local rounds, in feature units
STARTS = 8  # best candidates refined locally
PER_START = 32  # perturbations per start and round
TOP_OBSERVED = 5  # observations whose neighbourhoods are sampled


class Batch:
    def __init__(self, space: Space, points: list[Point], y: np.ndarray,
                 rng: np.random.Generator, options: Mapping[str, Any]) -> None:
        from gridml.search.bayes import LIARS

        self.space, self.enc, self.rng = space, Encoder(space), rng
        self.candidates, self.xi = int(options["candidates"]), float(options["xi"])
        feats = self.enc.encode(space.columns(points))
        fitted = fit_kernel(feats, y, int(rng.integers(2**31)), int(options["restarts"]))
        self.post = Posterior(fitted, feats, y)
        self.best = float(np.min(y))
        self.lie = float(LIARS[options["liar"]](y))
        self.anchors = feats[np.argsort(y)[:TOP_OBSERVED]]

    def pretend(self, points: list[Point]) -> None:
        """Condition on ``points`` as if they had returned the liar's value."""
        if points:
            feats = self.enc.encode(self.space.columns(points))
            self.post = self.post.add(feats, np.full(len(points), self.lie))

    def propose(self, seen: set[tuple]) -> Point | None:
        """The new point of highest EI (None when no candidate is new), then pretend it."""
        feats, ei = self._search()
        for i in np.argsort(-ei):
            cols = self.enc.snap(feats[i : i + 1])
            key = self.space.keys(cols)[0]
            if key not in seen:
                seen.add(key)
                self.post = self.post.add(feats[i : i + 1], np.array([self.lie]))
                return self.space.points(cols)[0]
        return None

    def _search(self) -> tuple[np.ndarray, np.ndarray]:
        pool = np.vstack([self._random(), self._around(self.anchors, 0.1, 64)])
        ei = self._ei(pool)
        starts = pool[np.argsort(-ei)[:STARTS]]
        start_ei = np.sort(ei)[::-1][:STARTS]
        found, found_ei = [pool], [ei]
        for r in RADII:
            trial = self._around(starts, r, PER_START)
            t_ei = self._ei(trial).reshape(len(starts), PER_START)
            j = np.argmax(t_ei, axis=1)
            better = t_ei[np.arange(len(starts)), j] > start_ei
            starts[better] = trial.reshape(len(starts), PER_START, -1)[better, j[better]]
            start_ei = np.maximum(start_ei, t_ei.max(axis=1))
            found.append(trial)
            found_ei.append(t_ei.ravel())
        return np.vstack(found), np.concatenate(found_ei)

    def _random(self) -> np.ndarray:
        return self.enc.unit_to_features(self.rng.random((self.candidates, self.space.dims)))

    def _around(self, centres: np.ndarray, radius: float, per: int) -> np.ndarray:
        noise = self.rng.normal(0.0, radius, (len(centres), per, centres.shape[1]))
        raw = (centres[:, None, :] + noise).reshape(-1, centres.shape[1])
        return self.enc.encode(self.enc.snap(raw))

    def _ei(self, feats: np.ndarray) -> np.ndarray:
        mu, sd = self.post.predict(feats)
        return expected_improvement(mu, sd, self.best, self.xi)
