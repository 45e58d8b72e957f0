"""The shared proposing path (gridml.search.study.propose): initial points first, warm start from
earlier studies in a real SQLite metrics store."""

from __future__ import annotations

from pathlib import Path

import pytest

from gridml.errors import SearchError
from gridml.search.study import propose, warm_start
from gridml.store import open_store

SPACE = {"lr": {"type": "real", "low": 1e-4, "high": 1e-1, "log": True},
         "units": {"type": "int", "low": 8, "high": 64}}


def section(**extra):
    return {"algorithm": "random", "objective": "val_loss", "direction": "minimize", "seed": 1,
            "space": SPACE, **extra}


@pytest.fixture
def store(tmp_path: Path):
    s = open_store(f"sqlite:///{tmp_path / 'g.db'}")
    yield s
    s.close()


def finished(store, name: str, points, values, **search):
    study = store.create_study(name, {"search": section(**search)}, name)
    for p, v in zip(points, values):
        t = store.create_trial(study.id, p)
        store.update_trial(t.id, state="completed" if v is not None else "failed", objective=v)
    return study


def test_initial_points_come_first_then_the_searcher(store):
    first = [{"lr": 0.01, "units": 32}, {"lr": 0.001, "units": 8}]
    points, _ = propose(section(initial_points=first), [], 3, store=store)
    assert points[:2] == first and len(points) == 3
    study = finished(store, "a", first[:1], [0.5])
    points, _ = propose(section(initial_points=first), store.list_trials(study.id), 2)
    assert points[0] == first[1] and points[1] not in first


def test_bad_initial_points_are_refused_in_one_line():
    with pytest.raises(SearchError, match=r"search.initial_points\[0\].lr: 5.0 is outside"):
        propose(section(initial_points=[{"lr": 5.0, "units": 8}]), [], 2)


def test_warm_start_tells_earlier_trials_and_skips_points_outside(store):
    old = [{"lr": 0.01, "units": 32}, {"lr": 0.02, "units": 100}, {"lr": 0.03, "units": 40},
           {"lr": 0.04, "units": 41, "gone": 1}]
    finished(store, "earlier", old, [0.3, 0.2, None, 0.1])
    warm = warm_start(section(warm_start=["earlier"]), store)
    assert warm.points == old[:1] + old[2:3] and warm.values == [0.3, None]
    assert warm.used == {"earlier": 2} and warm.skipped == {"earlier": 2}
    cold, _ = propose(section(), [], 4, store=store)
    hot, _ = propose(section(warm_start=["earlier"]), [], 4, store=store)
    assert cold != hot and not {(p["lr"], p["units"]) for p in hot} & {(0.01, 32), (0.03, 40)}


def test_warm_start_refuses_unknown_studies_and_other_objectives(store):
    with pytest.raises(SearchError, match="study 'nope' not found"):
        propose(section(warm_start=["nope"]), [], 1, store=store)
    finished(store, "acc", [], [], objective="val_accuracy", direction="maximize")
    with pytest.raises(SearchError, match="optimises val_accuracy"):
        propose(section(warm_start=["acc"]), [], 1, store=store)


def test_importance_names_the_parameter_that_matters(store):
    import numpy as np

    from gridml.search.importance import importance

    rng = np.random.default_rng(0)
    points = [{"lr": float(10 ** rng.uniform(-4, -1)), "units": int(rng.integers(8, 65))}
              for _ in range(30)]
    values = [(np.log10(p["lr"]) + 2.5) ** 2 + 0.001 * p["units"] for p in points]
    study = finished(store, "imp", points, values)
    shares = importance(section(), store.list_trials(study.id))
    assert list(shares) == ["lr", "units"] and shares["lr"] > 0.8
    assert sum(shares.values()) == pytest.approx(1.0)
    assert importance(section(), store.list_trials(study.id)) == shares  # seeded
    assert importance(section(), store.list_trials(study.id)[:3]) == {}
    # a finished trial outside the space (added before the space was what it is) is left out
    odd = finished(store, "imp-odd", [*points, {"lr": 0.9, "units": 8}], [*values, -5.0])
    assert importance(section(), store.list_trials(odd.id)) == shares


def test_importance_of_a_big_study_fits_a_seeded_sample(store, monkeypatch):
    import numpy as np

    from gridml.search import importance as imp

    rng = np.random.default_rng(2)
    points = [{"lr": float(10 ** rng.uniform(-4, -1)), "units": int(rng.integers(8, 65))}
              for _ in range(60)]
    values = [(np.log10(p["lr"]) + 2.5) ** 2 + 0.001 * p["units"] for p in points]
    study = finished(store, "big-imp", points, values)
    monkeypatch.setattr(imp, "MAX_TRIALS", 25)  # (500 in use: 10,000 trials took 160 s, 2 cores)
    fitted: list[int] = []
    real = imp._fanova
    monkeypatch.setattr(imp, "_fanova", lambda s, f, seed: fitted.append(len(f)) or real(s, f, seed))
    shares = imp.importance(section(), store.list_trials(study.id))
    assert fitted == [25] and list(shares)[0] == "lr"
    finite = [(p, v) for p, v in zip(points, values)]
    assert imp._sample(finite, 0) == imp._sample(finite, 0)  # the same trials every time
    assert imp._sample(finite, 0) != imp._sample(finite, 1)


def test_importance_is_kept_by_a_key_over_the_trials(store, tmp_path, monkeypatch):
    import json

    import numpy as np

    from gridml.search import importance as imp

    rng = np.random.default_rng(1)
    points = [{"lr": float(10 ** rng.uniform(-4, -1)), "units": int(rng.integers(8, 65))}
              for _ in range(8)]
    values = [(np.log10(p["lr"]) + 2.5) ** 2 + 0.001 * p["units"] for p in points]
    study = finished(store, "kept", points, values)
    cache = tmp_path / "runs" / "kept" / "importance.json"
    shares = imp.importance(section(), store.list_trials(study.id), cache=cache)
    doc = json.loads(cache.read_text())
    assert doc["shares"] == shares and len(doc["key"]) == 64
    # a new process (nothing in memory) reads the file: planted shares come back as they are
    monkeypatch.setattr(imp, "_KNOWN", {})
    cache.write_text(json.dumps({"key": doc["key"], "shares": {"lr": 0.25, "units": 0.75}}))
    assert imp.importance(section(), store.list_trials(study.id), cache=cache) == {"lr": 0.25, "units": 0.75}
    # a corrupt file is computed again (and rewritten)
    monkeypatch.setattr(imp, "_KNOWN", {})
    cache.write_text("{not json")
    assert imp.importance(section(), store.list_trials(study.id), cache=cache) == shares
    assert json.loads(cache.read_text())["shares"] == shares
    # one more finished trial: another key, the planted shares are not used
    monkeypatch.setattr(imp, "_KNOWN", {})
    cache.write_text(json.dumps({"key": doc["key"], "shares": {"lr": 0.25, "units": 0.75}}))
    t = store.create_trial(study.id, {"lr": 0.003, "units": 20})
    store.update_trial(t.id, state="completed", objective=0.01)
    again = imp.importance(section(), store.list_trials(study.id), cache=cache)
    assert again != {"lr": 0.25, "units": 0.75} and sum(again.values()) == pytest.approx(1.0)
    assert json.loads(cache.read_text())["key"] != doc["key"]
