"""Figures of merit of a classifier, framework-neutral (numpy only; matplotlib lazily for the
plots): weighted score histograms per class, merged over ranks by summing them (one all-reduce),
and from them background rejection at a signal efficiency, the weighted AUC, the ROC curve and
the artifacts ``roc.png``, ``scores.png`` and ``roc.json``.

**The discriminant.** Every event's score is turned into one number ``d`` whose larger values
are more signal-like: binary (one output): ``d`` = the log-odds (the logit itself for a torch
model, ``log(p / (1 - p))`` for a Keras probability); several classes (softmax):
``d = log(p_s / sum_i f_i p_i)`` over the background classes ``i`` (``training.discriminant``:
``{signal: s, background: [...], fractions: {i: f_i}}``; unnamed fractions share what the named
ones leave equally; defaults: signal 1, every other class background). Rejection and AUC do
not change under a monotone map of ``d``, so they are the same for the probability.

**The binning error.** ``d`` is histogrammed in :data:`BINS` uniform bins over
[-:data:`D_MAX`, :data:`D_MAX`] (width 0.005 in log-odds; values outside go to the end bins). The
ROC curve is exact at the bin edges (every threshold at an edge gives the true weighted
efficiencies); between edges it is interpolated linearly. So ``rejection_at_NN`` is the true
rejection at a threshold within one bin (0.005 in log-odds) of the exact one: the background
efficiency is off by at most the weighted background content of the bin where the signal
efficiency crosses NN %, divided by the total (:func:`rejection_error` gives this bound for a
histogram), and the AUC by at most sum_k s_k b_k / (S B) (events of both classes sharing a bin,
counted as ties, half). With thousands of events that is well under 1 %; the tests and
benchmarks/figures_of_merit.py compare with scikit-learn's exact ``roc_curve``.

Names: ``rejection_at_NN`` (any integer NN in 1..99) and ``auc``, prefixed ``val_`` for
validation as every metric.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import numpy as np

BINS = 8000
D_MAX = 20.0
EDGES = np.linspace(-D_MAX, D_MAX, BINS + 1)
_REJ = re.compile(r"^rejection_at_(\d{1,2})$")


def rejection_level(name: str) -> float | None:
    """0.NN for ``rejection_at_NN`` (1 <= NN <= 99), else None."""
    m = _REJ.match(name.lower())
    if m is None or not 1 <= int(m[1]) <= 99:
        return None
    return int(m[1]) / 100


def is_figure(name: str) -> bool:
    """Whether ``name`` (without ``val_``) is a figure of merit computed here."""
    return name.lower() == "auc" or rejection_level(name) is not None


# ---- the discriminant -------------------------------------------------------------------------
class Discriminant:
    """``training.discriminant`` as weights of the background classes."""

    def __init__(self, spec: dict[str, Any] | None, n_classes: int) -> None:
        spec = dict(spec or {})
        self.n = max(2, int(n_classes))
        self.signal = int(spec.get("signal", 1))
        bkg = spec.get("background")
        self.background = ([int(b) for b in bkg] if bkg is not None
                           else [c for c in range(self.n) if c != self.signal])
        given = {int(k): float(v) for k, v in (spec.get("fractions") or {}).items()}
        rest = [b for b in self.background if b not in given]
        share = (1.0 - sum(given.values())) / len(rest) if rest else 0.0
        self.fractions = np.array([given.get(b, share) for b in self.background])
        bad = [c for c in [self.signal, *self.background] if not 0 <= c < self.n]
        if bad or self.signal in self.background or not self.background:
            raise ValueError(f"training.discriminant: signal {self.signal}, background "
                             f"{self.background} do not fit {self.n} classes")

    def is_signal(self, cls: np.ndarray) -> np.ndarray:
        return cls == (self.signal if self.n > 2 else 1)

    def is_background(self, cls: np.ndarray) -> np.ndarray:
        return np.isin(cls, self.background if self.n > 2 else [0])


def discriminant(scores: np.ndarray, disc: Discriminant, logits: bool) -> np.ndarray:
    """``d`` (see the module docstring) of (B,) / (B, 1) binary or (B, K) multi-class scores
    (``logits``: raw outputs, else probabilities)."""
    s = np.asarray(scores, dtype=np.float64)
    if s.ndim == 1 or s.shape[-1] == 1:
        s = s.reshape(-1)
        if logits:
            return s
        p = np.clip(s, 1e-12, 1 - 1e-12)
        return np.log(p) - np.log1p(-p)
    if logits:
        s = s - s.max(axis=-1, keepdims=True)
        logp = s - np.log(np.exp(s).sum(axis=-1, keepdims=True))
    else:
        logp = np.log(np.clip(s, 1e-30, None))
    bkg = np.log(np.clip((np.exp(logp[:, disc.background]) * disc.fractions).sum(-1), 1e-300, None))
    return logp[:, disc.signal] - bkg


def classes(y: np.ndarray, n_outputs: int) -> np.ndarray:
    """Integer classes of labels: (B,) or (B, 1) 0/1 or indices, or (B, K) one-hot."""
    y = np.asarray(y)
    if y.ndim == 2 and y.shape[1] > 1:
        return y.argmax(-1)
    y = y.reshape(-1)
    return (y > 0.5).astype(np.int64) if n_outputs <= 1 else y.astype(np.int64)


# ---- histograms ---------------------------------------------------------------------------------
def bin_index(d: np.ndarray) -> np.ndarray:
    # truncation is the floor where it matters (>= 0); below 0 the clip makes it bin 0
    idx = ((np.asarray(d, np.float64) + D_MAX) * (BINS / (2 * D_MAX))).astype(np.int64)
    return np.clip(idx, 0, BINS - 1, out=idx)


def histograms(d: np.ndarray, cls: np.ndarray, w: np.ndarray | None, n_classes: int) -> np.ndarray:
    """(n_classes, BINS) weighted histograms of ``d`` per class (float64; sum them over ranks)."""
    n_classes = max(2, n_classes)
    cls = np.asarray(cls, np.int64).reshape(-1)
    w = np.ones(len(cls)) if w is None else np.asarray(w, np.float64).reshape(-1)
    flat = np.clip(cls, 0, n_classes - 1) * BINS + bin_index(d)
    return np.bincount(flat, weights=w, minlength=n_classes * BINS).reshape(n_classes, BINS)


def sig_bkg(hist: np.ndarray, disc: Discriminant) -> tuple[np.ndarray, np.ndarray]:
    """(signal, background) histograms out of the per-class ones."""
    ks = np.arange(hist.shape[0])
    return hist[disc.is_signal(ks)].sum(0), hist[disc.is_background(ks)].sum(0)


def roc(sig: np.ndarray, bkg: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(signal efficiency, background efficiency) at every bin edge, thresholds from high to
    low (both increasing from 0 to 1)."""
    s_tot, b_tot = float(sig.sum()), float(bkg.sum())
    eff_s = np.concatenate([[0.0], np.cumsum(sig[::-1])]) / (s_tot or 1.0)
    eff_b = np.concatenate([[0.0], np.cumsum(bkg[::-1])]) / (b_tot or 1.0)
    return eff_s, eff_b


def _crossing(eff_s: np.ndarray, level: float) -> int:
    """The first edge index at which the signal efficiency reaches ``level``."""
    above = np.nonzero(eff_s >= level)[0]
    return int(above[0]) if len(above) else len(eff_s) - 1


def background_efficiency(sig: np.ndarray, bkg: np.ndarray, level: float) -> float:
    eff_s, eff_b = roc(sig, bkg)
    if sig.sum() <= 0 or bkg.sum() <= 0:
        return float("nan")
    i = _crossing(eff_s, level)
    if i == 0:
        return float(eff_b[0])
    lo, hi = eff_s[i - 1], eff_s[i]
    t = (level - lo) / (hi - lo) if hi != lo else 1.0
    return float(eff_b[i - 1] + t * (eff_b[i] - eff_b[i - 1]))


def rejection(sig: np.ndarray, bkg: np.ndarray, level: float) -> float:
    """Background rejection 1/eps_bkg at signal efficiency ``level`` (inf when no background
    passes; nan without signal or background)."""
    eb = background_efficiency(sig, bkg, level)
    if math.isnan(eb):
        return eb
    return 1.0 / eb if eb > 0 else float("inf")


def rejection_error(sig: np.ndarray, bkg: np.ndarray, level: float) -> float:
    """The binning error bound of :func:`background_efficiency` at ``level``: the weighted
    background in the crossing bin over the total (absolute, in background efficiency)."""
    eff_s, _ = roc(sig, bkg)
    i = _crossing(eff_s, level)
    k = BINS - i  # edge i from the top closes bin BINS - i
    return float(abs(bkg[max(0, min(BINS - 1, k))]) / (abs(bkg.sum()) or 1.0))


def auc(sig: np.ndarray, bkg: np.ndarray) -> float:
    """Weighted ROC AUC: P(d_sig > d_bkg), events sharing a bin counted half."""
    s_tot, b_tot = float(sig.sum()), float(bkg.sum())
    if s_tot == 0 or b_tot == 0:
        return float("nan")
    below = np.cumsum(bkg) - bkg
    value = float((sig * (below + 0.5 * bkg)).sum()) / (s_tot * b_tot)
    return value if math.isfinite(value) else float("nan")


def figures(hist: np.ndarray, disc: Discriminant, names: list[str]) -> dict[str, float]:
    """The named figures (``auc``, ``rejection_at_NN``) from the merged per-class histograms."""
    sig, bkg = sig_bkg(hist, disc)
    out: dict[str, float] = {}
    for name in names:
        key = name.lower()
        if key == "auc":
            out[name] = auc(sig, bkg)
        elif (level := rejection_level(key)) is not None:
            out[name] = rejection(sig, bkg, level)
    return out


# ---- class weights ----------------------------------------------------------------------------
def class_weights(option: Any, cls: np.ndarray, w: np.ndarray | None,
                  n_classes: int) -> np.ndarray | None:
    """Per-class factors (n_classes,) for ``training.class_weights``: ``balanced`` gives class k
    total / (K * W_k), W_k the weighted count of class k in the training labels; a mapping
    {label: factor} gives those (1 for a class not named); None: no class weights."""
    if option in (None, "", {}):
        return None
    n = max(2, n_classes)
    if option == "balanced":
        counts = np.bincount(np.asarray(cls, np.int64).reshape(-1), minlength=n,
                             weights=None if w is None else np.asarray(w, np.float64).reshape(-1))
        counts = counts[:n]
        if np.any(counts <= 0):
            raise ValueError(f"training.class_weights: balanced needs a positive weighted count "
                             f"of every class; the training labels give {counts.tolist()}")
        return counts.sum() / (n * counts)
    if isinstance(option, dict):
        out = np.ones(n)
        for k, v in option.items():
            if not 0 <= int(k) < n:
                raise ValueError(f"training.class_weights: class {k} is not one of 0..{n - 1}")
            out[int(k)] = float(v)
        return out
    raise ValueError(f"training.class_weights: {option!r} is not 'balanced' or {{label: weight}}")


# ---- artifacts ----------------------------------------------------------------------------------
def write_artifacts(out: Path, hist: np.ndarray, disc: Discriminant, levels: list[int],
                    title: str, output_kind: str, suffix: str = "") -> dict[str, Any]:
    """``roc.json`` (the curve at the bin edges, thinned; AUC; rejections at ``levels`` %),
    ``roc.png`` (rejection vs signal efficiency, log y) and ``scores.png`` (per-class weighted
    normalised histograms of d) in ``out``; returns roc.json's content. ``suffix`` goes before
    the extension (``_test``: roc_test.json, roc_test.png, scores_test.png of the test split)."""
    from payloads.runtime.outputs import write_json

    sig, bkg = sig_bkg(hist, disc)
    eff_s, eff_b = roc(sig, bkg)
    keep = np.unique(np.concatenate([[0], np.nonzero(np.diff(eff_s) != 0)[0] + 1]))
    if len(keep) > 2000:
        keep = keep[np.linspace(0, len(keep) - 1, 2000).astype(int)]
    body = {"signal_efficiency": eff_s[keep].tolist(),
            "background_efficiency": eff_b[keep].tolist(),
            "auc": auc(sig, bkg),
            "rejection": {f"rejection_at_{n}": rejection(sig, bkg, n / 100) for n in levels},
            "discriminant": {"signal": disc.signal, "background": disc.background,
                             "fractions": disc.fractions.tolist(), "variable": "log-odds"},
            "output": output_kind, "bins": BINS, "range": [-D_MAX, D_MAX],
            "binning_error": {f"rejection_at_{n}": rejection_error(sig, bkg, n / 100)
                              for n in levels}}
    write_json(out / f"roc{suffix}.json", _finite(body))
    try:
        _plots(out, hist, eff_s, eff_b, title, suffix)
    except Exception as e:  # a plot is never worth a failed trial
        import logging

        logging.getLogger("gridml.payload").warning("roc.png/scores.png not written: %s", e)
    return body


def _finite(obj: Any) -> Any:
    if isinstance(obj, float) and not math.isfinite(obj):
        return None if math.isnan(obj) else ("inf" if obj > 0 else "-inf")
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_finite(v) for v in obj]
    return obj


def jsonable(obj: Any) -> Any:
    """``obj`` with NaN as null and infinities as "inf"/"-inf" (strict JSON, as roc.json)."""
    return _finite(obj)


def _plots(out: Path, hist: np.ndarray, eff_s: np.ndarray, eff_b: np.ndarray, title: str,
           suffix: str = "") -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 4))
    ok = (eff_b > 0) & (eff_s > 0)
    ax.plot(eff_s[ok], 1.0 / eff_b[ok])
    ax.set_yscale("log")
    ax.set_xlabel("signal efficiency")
    ax.set_ylabel("background rejection 1/eps_bkg")
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    fig.subplots_adjust(left=0.16, bottom=0.13, right=0.97, top=0.92)  # tight_layout: 10x slower
    fig.savefig(out / f"roc{suffix}.png", dpi=100)
    plt.close(fig)

    used = np.nonzero(hist.sum(0))[0]
    lo, hi = (used.min(), used.max() + 1) if len(used) else (0, BINS)
    group = max(1, (hi - lo) // 50)  # about 50 bins over the used range
    fig, ax = plt.subplots(figsize=(5, 4))
    for k in range(hist.shape[0]):
        h = hist[k, lo:hi]
        n = len(h) // group * group
        coarse = h[:n].reshape(-1, group).sum(1) if n else h
        total = coarse.sum()
        if total == 0:
            continue
        edges = EDGES[lo:lo + len(coarse) * group + 1:group]
        ax.stairs(coarse / total, edges, label=f"class {k}")
    ax.set_xlabel("discriminant d (log-odds)")
    ax.set_ylabel("weighted fraction")
    ax.set_title(title)
    ax.legend()
    fig.subplots_adjust(left=0.16, bottom=0.13, right=0.97, top=0.92)
    fig.savefig(out / f"scores{suffix}.png", dpi=100)
    plt.close(fig)
