"""Figures of merit (payloads/runtime/figures.py) against scikit-learn's exact ROC curve on the
same weighted scores, the merge of histograms over ranks, class weights and the artifacts."""

from __future__ import annotations

import json

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score, roc_curve

from payloads.runtime import figures


def _sample(n: int = 20000, seed: int = 0, negative: bool = False):
    rng = np.random.default_rng(seed)
    y = (rng.random(n) < 0.4).astype(np.int64)
    logit = rng.normal(np.where(y == 1, 1.5, -1.0), 1.2)
    w = rng.uniform(0.5, 2.0, n)
    if negative:  # a few negative weights, as NLO generators give
        w[rng.random(n) < 0.1] *= -0.3
    return y, logit, w


def _sklearn_rejection(y, d, w, level):
    fpr, tpr, _ = roc_curve(y, d, sample_weight=w)
    return 1.0 / float(np.interp(level, tpr, fpr))


@pytest.mark.parametrize("negative", [False, True])
@pytest.mark.parametrize("nn", [30, 50, 77, 90])
def test_rejection_matches_sklearn_within_the_binning_error(nn, negative):
    y, d, w = _sample(negative=negative)
    disc = figures.Discriminant(None, 2)
    hist = figures.histograms(d, y, w, 2)
    sig, bkg = figures.sig_bkg(hist, disc)
    got = figures.figures(hist, disc, [f"rejection_at_{nn}"])[f"rejection_at_{nn}"]
    want = _sklearn_rejection(y, d, w, nn / 100)
    err = figures.rejection_error(sig, bkg, nn / 100)
    eb_got, eb_want = 1 / got, 1 / want
    assert abs(eb_got - eb_want) <= err + 1e-9, (got, want, err)
    assert err < 0.01  # and the bound is small for 20k events


def test_weighted_auc_matches_sklearn():
    y, d, w = _sample()
    hist = figures.histograms(d, y, w, 2)
    got = figures.figures(hist, figures.Discriminant(None, 2), ["auc"])["auc"]
    assert got == pytest.approx(roc_auc_score(y, d, sample_weight=w), abs=2e-4)


def test_weights_change_the_figures():
    y, d, w = _sample()
    disc = figures.Discriminant(None, 2)
    plain = figures.figures(figures.histograms(d, y, None, 2), disc, ["rejection_at_50"])
    heavy = np.where((y == 0) & (d > 0), 50.0, 1.0)  # background that passes weighs more
    weighted = figures.figures(figures.histograms(d, y, heavy, 2), disc, ["rejection_at_50"])
    assert weighted["rejection_at_50"] < plain["rejection_at_50"] / 2


def test_histograms_merged_over_ranks_equal_one_histogram():
    y, d, w = _sample()
    parts = np.array_split(np.arange(len(y)), 3)  # three ranks' shards
    merged = sum(figures.histograms(d[p], y[p], w[p], 2) for p in parts)
    whole = figures.histograms(d, y, w, 2)
    np.testing.assert_allclose(merged, whole, rtol=1e-12, atol=1e-9)
    disc = figures.Discriminant(None, 2)
    names = ["auc", "rejection_at_50"]
    assert figures.figures(merged, disc, names) == pytest.approx(figures.figures(whole, disc, names))


def test_multiclass_discriminant_with_fractions():
    rng = np.random.default_rng(1)
    n = 9000
    y = rng.integers(0, 3, n)
    logits = rng.normal(size=(n, 3)) + 2.0 * np.eye(3)[y]
    p = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
    disc = figures.Discriminant({"signal": 0, "background": [1, 2], "fractions": {1: 0.1}}, 3)
    assert disc.fractions.tolist() == pytest.approx([0.1, 0.9])
    d = figures.discriminant(p, disc, logits=False)
    want = np.log(p[:, 0] / (0.1 * p[:, 1] + 0.9 * p[:, 2]))
    np.testing.assert_allclose(d, want, rtol=1e-9)
    np.testing.assert_allclose(figures.discriminant(logits, disc, logits=True), want, rtol=1e-7)
    hist = figures.histograms(d, y, None, 3)
    got = figures.figures(hist, disc, ["rejection_at_50"])["rejection_at_50"]
    truth = (y == 0).astype(int)
    keep = np.isin(y, [0, 1, 2])
    assert 1 / got == pytest.approx(1 / _sklearn_rejection(truth[keep], d[keep], None, 0.5), abs=0.01)
    with pytest.raises(ValueError, match="do not fit"):
        figures.Discriminant({"signal": 3}, 3)


def test_names():
    assert figures.rejection_level("rejection_at_77") == 0.77
    assert figures.rejection_level("rejection_at_0") is None
    assert figures.rejection_level("rejection_at_100") is None
    assert figures.is_figure("auc") and not figures.is_figure("accuracy")


def test_class_weights_balanced_from_weighted_counts():
    y = np.array([0, 0, 0, 1])
    w = np.array([1.0, 1.0, 2.0, 2.0])  # weighted counts 4 and 2
    cw = figures.class_weights("balanced", y, w, 2)
    assert cw.tolist() == pytest.approx([6 / (2 * 4), 6 / (2 * 2)])
    assert (np.bincount(y, weights=w * cw[y])).tolist() == pytest.approx([3.0, 3.0])
    assert figures.class_weights({1: 5}, y, w, 2).tolist() == [1.0, 5.0]
    assert figures.class_weights(None, y, w, 2) is None
    with pytest.raises(ValueError, match="balanced"):
        figures.class_weights("balanced", np.zeros(4, int), None, 2)
    with pytest.raises(ValueError, match="not one of"):
        figures.class_weights({4: 1.0}, y, w, 2)


def test_artifacts(tmp_path):
    y, d, w = _sample(4000)
    hist = figures.histograms(d, y, w, 2)
    body = figures.write_artifacts(tmp_path, hist, figures.Discriminant(None, 2), [50, 90],
                                   "t", "logit")
    saved = json.loads((tmp_path / "roc.json").read_text())
    assert saved["auc"] == pytest.approx(body["auc"])
    assert set(saved["rejection"]) == {"rejection_at_50", "rejection_at_90"}
    assert saved["output"] == "logit"
    assert saved["signal_efficiency"][0] == 0 and saved["signal_efficiency"][-1] == pytest.approx(1)
    for name in ("roc.png", "scores.png"):
        assert (tmp_path / name).read_bytes()[:4] == b"\x89PNG"
