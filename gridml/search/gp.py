"""Gaussian-process pieces for fast batches: fit the kernel once, then cheap posteriors.

The model is scikit-optimize's default GP (``cook_estimator("GP")``): a constant times a Matern
5/2 kernel with one length scale per feature, a learned Gaussian noise (skopt's
``noise="gaussian"``), normalised targets, the same hyperparameter bounds, and L-BFGS on the log
marginal likelihood from the default start plus ``restarts`` random starts. What differs is
speed: :func:`fit_kernel` computes the likelihood and its gradient from pairwise differences
computed once (sklearn recomputes them and a gradient tensor at every step), which makes a fit at
200 observations about 10x cheaper; the result is its numbers (and, on demand, sklearn kernel
objects: sklearn costs ~1.5 s of CPU to import, which a controller that never asks for them skips).
:class:`Posterior` then conditions that *fixed* kernel on any rows (observations plus the
constant-liar values of a batch): one Cholesky per added point instead of a hyperparameter fit.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.linalg import cho_solve, cholesky, lapack, solve_triangular
from scipy.special import ndtr
from threadpoolctl import ThreadpoolController

JITTER = 1e-8
AMP_BOUNDS = (0.01, 1000.0)  # skopt's ConstantKernel bounds
SCALE_BOUNDS = (0.01, 100.0)  # skopt's Matern length-scale bounds
NOISE_BOUNDS = (1e-5, 1e5)  # sklearn's WhiteKernel default bounds
SQRT5 = np.sqrt(5.0)
PRIOR_SHAPE, PRIOR_RATE = 3.0, 6.0  # length scales ~ Gamma(3, 6): mean 0.5 of the unit range


@functools.lru_cache(maxsize=1)
def _controller() -> ThreadpoolController:
    return ThreadpoolController()  # scans the loaded libraries once, not at every limit


def one_blas_thread() -> Any:
    """A context in which BLAS runs on one thread."""
    return _controller().limit(limits=1, user_api="blas")


@dataclass
class Fitted:
    amp: float  # the constant (signal variance, on normalised targets)
    length_scale: np.ndarray  # the Matern 5/2 length scale of each feature
    noise: float  # variance of the Gaussian noise, on normalised targets

    @property
    def kernel(self) -> Any:
        """The same kernel as sklearn objects (constant * Matern 5/2, hyperparameters fixed)."""
        from sklearn.gaussian_process.kernels import ConstantKernel, Matern

        return ConstantKernel(self.amp, "fixed") * Matern(self.length_scale, "fixed", nu=2.5)


def fit_kernel(feats: np.ndarray, y: np.ndarray, seed: int, restarts: int,
               centre: float | None = None, most: int = 0) -> Fitted:
    """Fit the kernel hyperparameters once (the expensive step of Bayesian optimisation).

    ``most`` > 0: fit on a random subset of at most that many rows (the posterior still uses all).
    """
    rng = np.random.default_rng(seed)
    z = (y - (np.mean(y) if centre is None else centre)) / (np.std(y) or 1.0)
    if 0 < most < len(y):
        keep = np.sort(rng.choice(len(y), most, replace=False))
        feats, z = feats[keep], z[keep]
    n, d = feats.shape
    diff2 = ((feats.T[:, :, None] - feats.T[:, None, :]) ** 2).reshape(d, n * n)  # once
    bounds = np.log([AMP_BOUNDS] + [SCALE_BOUNDS] * d + [NOISE_BOUNDS])
    starts = [np.zeros(d + 2)] + [rng.uniform(bounds[:, 0], bounds[:, 1]) for _ in range(restarts)]
    with one_blas_thread():  # small matrices: threads only contend
        best = min((_optimise(theta, diff2, z, bounds) for theta in starts), key=lambda r: r[1])
    return _as_kernel(np.exp(best[0]))


def _optimise(theta: np.ndarray, diff2: np.ndarray, z: np.ndarray,
              bounds: np.ndarray) -> tuple[np.ndarray, float]:
    from scipy.optimize import minimize  # ~0.7 s of CPU to import: not before the first fit

    res = minimize(neg_log_likelihood, theta, args=(diff2, z), jac=True, method="L-BFGS-B",
                   bounds=bounds)
    return res.x, float(res.fun)


def neg_log_likelihood(theta: np.ndarray, diff2: np.ndarray,
                       z: np.ndarray) -> tuple[float, np.ndarray]:
    """Minus the log marginal likelihood and its gradient in log(amp, scales..., noise).

    ``diff2`` holds the squared differences of the rows, one feature per row (d x n*n).
    """
    n = len(z)
    amp, inv2, noise = np.exp(theta[0]), np.exp(-2.0 * theta[1:-1]), np.exp(theta[-1])
    r = np.sqrt(np.maximum(inv2 @ diff2, 0.0)).reshape(n, n)
    e = np.exp(-SQRT5 * r)
    kf = amp * (1.0 + SQRT5 * r + 5.0 / 3.0 * r**2) * e
    k = kf + (noise + JITTER) * np.eye(n)
    chol, info = lapack.dpotrf(k, lower=1, clean=1)
    if info != 0:
        return 1e25, np.zeros_like(theta)
    alpha = cho_solve((chol, True), z, check_finite=False)
    nll = 0.5 * z @ alpha + np.log(np.diag(chol)).sum() + 0.5 * n * np.log(2 * np.pi)
    kinv, _ = lapack.dpotri(chol, lower=1)  # lower triangle of K^-1, zeros above
    dk = amp * 5.0 / 3.0 * (1.0 + SQRT5 * r) * e  # d k / d (r^2 / 2), symmetric, zero diagonal
    # 0.5 * trace((alpha alpha^T - K^-1) dK/dtheta) for each hyperparameter; K^-1 is symmetric,
    # so sum(K^-1 * M) = 2 * sum(lower * M) - sum(diag * diag(M)) for symmetric M
    aa = np.outer(alpha, alpha)
    g_amp = alpha @ kf @ alpha - (2.0 * np.sum(kinv * kf) - np.diag(kinv) @ np.diag(kf))
    g_scales = inv2 * (diff2 @ (aa * dk).ravel() - 2.0 * (diff2 @ (kinv * dk).ravel()))
    g_noise = noise * (alpha @ alpha - np.trace(kinv))
    grad = np.concatenate([[g_amp], g_scales, [g_noise]])
    scales = np.exp(theta[1:-1])  # Gamma(3, 6) prior on each length scale, in log coordinates
    nll += np.sum(PRIOR_RATE * scales - PRIOR_SHAPE * theta[1:-1])
    grad[1:-1] -= 2.0 * (PRIOR_RATE * scales - PRIOR_SHAPE)
    return float(nll), -0.5 * grad


def _as_kernel(params: np.ndarray) -> Fitted:
    return Fitted(float(params[0]), np.asarray(params[1:-1], dtype=float), float(params[-1]))


class Posterior:
    """The GP posterior of the fixed kernel given rows ``feats`` with targets ``y``.

    ``add`` extends the Cholesky factor by the new rows (O(n^2 k), no refactorisation), and a
    ``pool`` of candidate rows registered with ``track`` keeps its mean and variance up to date
    through every ``add`` by rank-k updates, so a batch scores its fixed candidate pool with one
    triangular solve instead of one per point.
    """

    def __init__(self, fitted: Fitted, feats: np.ndarray, y: np.ndarray,
                 scale: tuple[float, float] | None = None) -> None:
        self.fitted, self.feats, self.y = fitted, feats, y
        self.mean, self.std = scale or (float(np.mean(y)), float(np.std(y)) or 1.0)
        self.amp = fitted.amp
        self.inv_scale = 1.0 / fitted.length_scale
        self.pool: _Pool | None = None
        k = self.cov(feats, feats)
        k[np.diag_indices_from(k)] += fitted.noise + JITTER
        self.chol = cholesky(k, lower=True, check_finite=False)
        self.u = solve_triangular(self.chol, (y - self.mean) / self.std, lower=True,
                                  check_finite=False)
        self.alpha = solve_triangular(self.chol, self.u, lower=True, trans="T",
                                      check_finite=False)

    def cov(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """The kernel between rows ``a`` and ``b`` (constant * Matern 5/2, as sklearn's)."""
        sa, sb = a * self.inv_scale, b * self.inv_scale
        d2 = (sa * sa).sum(1)[:, None] + (sb * sb).sum(1)[None, :] - 2.0 * (sa @ sb.T)
        r = SQRT5 * np.sqrt(np.maximum(d2, 0.0))
        out: np.ndarray = self.amp * (1.0 + r + r * r / 3.0) * np.exp(-r)
        return out

    def add(self, feats: np.ndarray, y: np.ndarray) -> Posterior:
        """A new posterior with more rows (same kernel: no hyperparameter fit, no refactoring)."""
        new = object.__new__(Posterior)
        new.__dict__.update(self.__dict__)
        n, k = len(self.y), len(y)
        b = solve_triangular(self.chol, self.cov(self.feats, feats), lower=True,
                             check_finite=False)
        c = self.cov(feats, feats) - b.T @ b
        c[np.diag_indices_from(c)] += self.fitted.noise + JITTER
        lc = cholesky(c, lower=True, check_finite=False)
        chol = np.zeros((n + k, n + k))
        chol[:n, :n], chol[n:, :n], chol[n:, n:] = self.chol, b.T, lc
        w_u = solve_triangular(lc, (y - self.mean) / self.std - b.T @ self.u, lower=True,
                               check_finite=False)
        new.feats, new.y = np.vstack([self.feats, feats]), np.concatenate([self.y, y])
        new.chol, new.u = chol, np.concatenate([self.u, w_u])
        new.alpha = solve_triangular(chol, new.u, lower=True, trans="T", check_finite=False)
        if self.pool is not None:
            pool = self.pool
            w = solve_triangular(lc, self.cov(feats, pool.feats) - b.T @ pool.v, lower=True,
                                 check_finite=False)
            new.pool = _Pool(pool.feats, np.vstack([pool.v, w]), pool.mu + w.T @ w_u,
                             pool.var - np.einsum("ij,ij->j", w, w))
        return new

    def track(self, feats: np.ndarray) -> None:
        """Keep the mean and variance at the candidate rows ``feats`` through every ``add``."""
        v = solve_triangular(self.chol, self.cov(self.feats, feats), lower=True,
                             check_finite=False)
        self.pool = _Pool(feats, v, v.T @ self.u, self.amp - np.einsum("ij,ij->j", v, v))

    def predict_pool(self) -> tuple[np.ndarray, np.ndarray]:
        """Mean and standard deviation at the tracked pool, in units of ``y``."""
        assert self.pool is not None
        sd = np.sqrt(np.maximum(self.pool.var, 1e-12))
        return self.mean + self.std * self.pool.mu, self.std * sd

    def predict(self, feats: np.ndarray, sd: bool = True) -> tuple[np.ndarray, np.ndarray]:
        """Mean and standard deviation (zeros unless ``sd``) at ``feats``, in units of ``y``."""
        ks = self.cov(feats, self.feats)
        mu = ks @ self.alpha
        if not sd:
            return self.mean + self.std * mu, np.zeros(len(mu))
        v = solve_triangular(self.chol, ks.T, lower=True, check_finite=False)
        var = self.amp - np.einsum("ij,ij->j", v, v)
        dev: np.ndarray = np.sqrt(np.maximum(var, 1e-12))
        return self.mean + self.std * mu, self.std * dev


@dataclass
class _Pool:
    feats: np.ndarray
    v: np.ndarray  # L^-1 K(observations, pool)
    mu: np.ndarray  # normalised mean
    var: np.ndarray  # normalised latent variance


def expected_improvement(mu: np.ndarray, sd: np.ndarray, best: float, xi: float) -> np.ndarray:
    """EI for minimisation (``xi``: the improvement to ask for, in the units of ``y``)."""
    imp = best - mu - xi
    z = imp / sd
    return imp * ndtr(z) + sd * np.exp(-0.5 * z * z) / np.sqrt(2.0 * np.pi)
