"""Early-stopping rules on recorded learning curves (deterministic decisions)."""

from __future__ import annotations

import statistics

import pytest

from gridml.errors import SpecError
from gridml.search.replay import best_index, replay
from gridml.search.stopping import decide, validate_early_stopping

# val_loss per epoch of 8 trials, recorded from scikit-learn MLPs of random learning rate and
# width on a synthetic classification set (the recorder is in benchmarks/search.py).
CURVES = [
    [0.3616, 0.3069, 0.2828, 0.2673, 0.2552, 0.2461],
    [0.8404, 0.791, 0.7467, 0.7072, 0.6717, 0.6397],
    [0.4828, 0.3207, 0.3155, 0.3369, 0.289, 0.3745],
    [0.7247, 0.5443, 0.4527, 0.3976, 0.362, 0.3383],
    [0.3091, 0.24, 0.2331, 0.2394, 0.237, 0.2395],
    [0.4047, 0.3092, 0.2761, 0.2573, 0.2447, 0.2353],
    [0.6904, 0.6763, 0.6635, 0.6513, 0.6397, 0.6286],
    [0.3379, 0.2761, 0.2563, 0.244, 0.2347, 0.2273],
]
MEDIAN = {"rule": "median", "min_epochs": 2}
ASHA = {"rule": "asha", "min_epochs": 1, "reduction": 3}


def others(i: int, epochs: int | None = None) -> list[list[float]]:
    return [c[:epochs] for j, c in enumerate(CURVES) if j != i]


def test_no_rule_never_stops():
    assert decide(None, CURVES[1], others(1), "minimize") == (False, "")
    assert decide({}, CURVES[1], others(1), "minimize") == (False, "")


def test_median_stops_a_trial_worse_than_the_median_and_says_why():
    stop, reason = decide(MEDIAN, CURVES[1][:2], others(1), "minimize", metric="val_loss")
    median = statistics.median(c[1] for c in others(1))
    assert stop
    assert reason == f"val_loss 0.791 at epoch 2 worse than median {median:.4g} of 7 trials"


def test_median_keeps_a_good_trial_and_waits_for_min_epochs_and_min_trials():
    assert not decide(MEDIAN, CURVES[4][:2], others(4), "minimize")[0]
    stop, reason = decide(MEDIAN, CURVES[1][:1], others(1), "minimize")
    assert not stop and "min_epochs 2" in reason
    stop, reason = decide(MEDIAN, CURVES[1][:3], others(1)[:2], "minimize")
    assert not stop and "only 2 other trials" in reason


def test_median_compares_the_best_so_far_with_others_at_the_same_epoch():
    others_at_2 = [[0.5, 0.35], [0.6, 0.4], [0.55, 0.45]]  # median 0.4 at epoch 2
    assert not decide(MEDIAN, [0.3, 0.5], others_at_2, "minimize")[0]  # best so far 0.3 counts
    assert decide(MEDIAN, [0.42, 0.41], others_at_2, "minimize")[0]
    # others that have not reached epoch 2 are left out
    stop, reason = decide(MEDIAN, [0.42, 0.41], others_at_2 + [[0.1]], "minimize")
    assert stop and reason.endswith("median 0.4 of 3 trials")


def test_asha_keeps_only_the_top_third_at_each_rung():
    at_rung1 = [c[0] for c in CURVES]
    keep = sorted(at_rung1)[: len(CURVES) // 3]
    for i, c in enumerate(CURVES):
        stop, reason = decide(ASHA, c[:1], others(i), "minimize")
        assert stop == (c[0] not in keep), reason
    stop, reason = decide(ASHA, CURVES[1][:2], others(1), "minimize")
    assert not stop and "not a rung" in reason  # rungs at epochs 1, 3, 9


def test_asha_at_the_second_rung_and_alone():
    best3 = sorted(min(c[:3]) for c in CURVES)
    for i, c in enumerate(CURVES):
        assert decide(ASHA, c[:3], others(i), "minimize")[0] == (min(c[:3]) > best3[1])
    assert decide(ASHA, CURVES[1][:1], [], "minimize") == (
        False, "objective 0.8404: rank 1 of 1 at rung 0 (epoch 1), within the top 1 kept (1/3)")


@pytest.mark.parametrize("rule", [MEDIAN, ASHA])
def test_maximize_mirrors_minimize_and_order_does_not_matter(rule):
    for i, c in enumerate(CURVES):
        for e in range(1, 4):
            lo = decide(rule, c[:e], others(i), "minimize")[0]
            hi = decide(rule, [-v for v in c[:e]], [[-v for v in o] for o in others(i)],
                        "maximize")[0]
            rev = decide(rule, c[:e], others(i)[::-1], "minimize")[0]
            assert lo == hi == rev


def test_a_diverged_trial_is_stopped():
    assert decide(MEDIAN, [0.5, float("nan")], others(0), "minimize")[0]


def test_replayed_median_campaign_saves_epochs_and_keeps_the_best():
    result = replay(MEDIAN, CURVES, parallel=2)
    assert set(result.pruned) == {3, 6} and result.saved == pytest.approx(8 / 48)
    best = best_index(CURVES)
    assert best not in result.pruned and result.ran[best] == len(CURVES[best])
    # trial 1, the worst, started beside trial 0 only: too few others to judge it (min_trials 3)
    assert result.ran[1] == 6
    assert replay(None, CURVES, parallel=2).saved == 0.0


def test_replayed_asha_campaign_is_aggressive_and_can_prune_a_late_bloomer():
    result = replay(ASHA, CURVES, parallel=2)
    assert result.saved > 0.5
    finished = [t for t, n in result.ran.items() if n == 6]
    assert len(finished) <= len(CURVES) // 3 + 1
    best = best_index(CURVES)  # trial 7: best only from epoch 5 on, second at rung 1 (epoch 3)
    assert best == 7 and "rank 2 of 3 at rung 1" in result.pruned[best]


def test_validation_names_the_problem():
    assert validate_early_stopping(None) == []
    assert validate_early_stopping(ASHA) == []
    assert validate_early_stopping({"rule": "hyperband"}) == [
        "rule: 'hyperband' is not a rule; use one of median, asha"]
    assert validate_early_stopping({"rule": "asha", "reduction": 1, "min_trials": 2}) == [
        "min_trials: not an option of rule 'asha'; it takes ['min_epochs', 'reduction']",
        "reduction: must be a whole number >= 2 (got 1)"]
    assert validate_early_stopping({"rule": "median", "min_epochs": 0}) == [
        "min_epochs: must be a whole number >= 1 (got 0)"]
    with pytest.raises(SpecError, match="search.early_stopping.rule"):
        decide({"rule": "nope"}, [1.0], [], "minimize")
