"""The one per-epoch report (payloads/runtime/report.py), shared by the payload and the store:
non-finite numbers are JSON null and come back as NaN, whichever way the body travelled."""

from __future__ import annotations

import json
import math

import pytest

from gridml.store import EpochReport
from gridml.store.sql import convert
from payloads.runtime import profile, report
from payloads.runtime.core import build_report


def test_the_store_re_exports_the_payloads_report() -> None:
    from gridml.store.records import EpochReport as from_records

    assert EpochReport is report.EpochReport is from_records


def test_non_finite_numbers_are_null_in_json_and_nan_back() -> None:
    r = EpochReport(2, {"loss": math.nan, "val_loss": -math.inf, "auc": 0.75, "n": 3}, 1.5,
                    samples_per_s=math.inf, threads=4, extra={"ranks": 2})
    body = r.to_json()
    assert body["metrics"] == {"loss": None, "val_loss": None, "auc": 0.75, "n": 3}
    assert body["samples_per_s"] is None and body["epoch_time"] == 1.5
    line = json.dumps(body, allow_nan=False)  # strict JSON, as the spool writes it
    back = EpochReport.from_json(json.loads(line))
    assert math.isnan(back.metrics["loss"]) and math.isnan(back.metrics["val_loss"])
    assert back.metrics["auc"] == 0.75 and back.samples_per_s is None
    assert back.to_json() == body
    assert math.isnan(EpochReport.from_json({**body, "epoch_time": None}).epoch_time)


@pytest.mark.parametrize("bad", [{"epoch": 1}, {"epoch": 1, "metrics": 3, "epoch_time": 1},
                                 {"epoch": "x", "metrics": {}, "epoch_time": 1},
                                 {"epoch": 1, "metrics": {"loss": "high"}, "epoch_time": 1}])
def test_what_is_not_a_report_is_refused(bad: dict) -> None:
    with pytest.raises((KeyError, TypeError, ValueError)):
        EpochReport.from_json(bad)


def test_a_null_metric_is_stored_like_a_nan_one() -> None:
    """The store's canonical body (its idempotency hash) is the same for NaN in memory and for
    the null it becomes in JSON: a spooled diverged epoch equals the one posted live."""
    live = EpochReport(1, {"loss": math.nan, "acc": 0.5}, 2.0, samples_per_s=10.0)
    spooled = EpochReport.from_json(json.loads(json.dumps(live.to_json())))
    a, b = convert.canonical_epoch(live), convert.canonical_epoch(spooled)
    assert convert.body_hash(a) == convert.body_hash(b)
    assert convert.encode_body(a)["metrics"]["loss"] == "nan"


def test_build_report_is_the_payloads_epoch() -> None:
    prof = profile.combine([profile.rank_profile(2.0, 1.6, 0.8, 0, 1.0),
                            profile.rank_profile(2.0, 1.5, 0.1, 0, 1.0)], 800)
    r = build_report(3, {"loss": float("nan"), "acc": 0.5}, prof,
                     {"cache": {"hit_rate": 0.5, "used_mb": 1, "budget_mb": 2}},
                     {"n_params": 12.0})
    body = r.to_json()
    assert body["epoch"] == 3 and body["metrics"] == {"loss": None, "acc": 0.5, "n_params": 12.0}
    assert body["samples_per_s"] == prof["samples_per_s"] and body["threads"] == prof["threads"]
    assert body["extra"]["ranks"] == 2 and body["extra"]["cache"]["hit_rate"] == 0.5
    assert body["extra"]["input_bound"].startswith("rank 0 waited 40%")
    assert "input_bound" not in build_report(1, {}, {**prof, "input_wait_frac": 0.1}, {},
                                             {}).extra
