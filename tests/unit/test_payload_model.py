"""The user's model file, normalisation, optimizer and mixed precision (TensorFlow in-process)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from payloads.runtime import model as user_model
from payloads.runtime.errors import PayloadFailure

ROOT = Path(__file__).resolve().parents[2]
MLP = ROOT / "examples/models/mlp.py"
tf = pytest.importorskip("tensorflow")


def test_model_file_errors_name_the_file(tmp_path: Path) -> None:
    with pytest.raises(PayloadFailure, match="nope.py does not exist"):
        user_model.load_build_model(tmp_path / "nope.py")
    bad = tmp_path / "m.py"
    bad.write_text("def build(hparams, shape):\n    return None\n")
    with pytest.raises(PayloadFailure, match="m.py defines no build_model"):
        user_model.load_build_model(bad)
    bad.write_text("import not_a_module_anywhere\n")
    with pytest.raises(PayloadFailure, match="m.py failed to import: ModuleNotFoundError"):
        user_model.load_build_model(bad)


def test_normalization_adapted_from_the_sample() -> None:
    m = user_model.build(MLP, {"units": 8}, (3,))
    x = np.random.default_rng(0).normal([100.0, 0.0, -5.0], [30.0, 1.0, 0.1], (5000, 3))
    assert user_model.adapt_normalization(m, [x]) == 1
    z = m.get_layer("normalize")(x.astype(np.float32)).numpy()
    assert np.allclose(z.mean(0), 0, atol=0.05) and np.allclose(z.std(0), 1, atol=0.05)
    assert user_model.adapt_normalization(m, [x]) == 0  # already adapted: left alone


def test_a_dict_input_model_s_normalization_gets_its_own_input_by_name() -> None:
    """keras.Model({"x": ..., "tracks": ...}) lists model.inputs sorted by name (tracks, x):
    the data's order (x, tracks) must not hand x's Normalization the tracks' rows."""
    keras = tf.keras
    x_in, t_in = keras.Input((3,), name="x"), keras.Input((6,), name="tracks")
    z = keras.layers.Concatenate()([keras.layers.Normalization(name="nx")(x_in), t_in])
    m = keras.Model({"x": x_in, "tracks": t_in}, keras.layers.Dense(1)(z))
    assert [t.name.split(":")[0] for t in m.inputs] == ["tracks", "x"]
    rng = np.random.default_rng(0)
    x = rng.normal([100.0, 0.0, -5.0], [30.0, 1.0, 0.1], (2000, 3))
    assert user_model.adapt_normalization(m, [x, rng.normal(size=(2000, 6))], ["x", "tracks"]) == 1
    np.testing.assert_allclose(m.get_layer("nx").mean.numpy().ravel(), x.mean(0), rtol=1e-3)


def test_optimizer_learning_rate_and_metrics() -> None:
    opt = user_model.optimizer("sgd", user_model.scaled_lr(0.01, 4, "linear"))
    assert float(opt.learning_rate) == pytest.approx(0.04)
    assert user_model.scaled_lr(0.01, 4, "none") == 0.01
    with pytest.raises(PayloadFailure, match="training.optimizer 'lion'"):
        user_model.optimizer("lion", 0.1)
    names = [getattr(m, "name", m) for m in user_model.metric_objects(["accuracy", "auc"],
                                                                    "binary_crossentropy")]
    assert names == ["accuracy", "auc"]


def test_mixed_bfloat16_trains_with_a_float32_output() -> None:
    keras = tf.keras
    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    try:
        m = user_model.build(MLP, {"units": 16, "dropout": 0.0}, (10,))
        assert m.get_layer("dense_0").compute_dtype == "bfloat16"
        assert m.output.dtype == tf.float32
        m.compile(optimizer=user_model.optimizer("adam", 1e-3), loss="binary_crossentropy")
        x = np.random.default_rng(1).normal(size=(256, 10)).astype(np.float32)
        y = (x[:, 0] > 0).astype(np.float32)
        hist = m.fit(x, y, batch_size=64, epochs=2, verbose=0)
        assert np.isfinite(hist.history["loss"]).all()
    finally:
        keras.mixed_precision.set_global_policy("float32")



@pytest.mark.parametrize("loss_scaled", [False, True])
def test_the_optimizer_slots_exist_before_the_first_step_so_it_is_traced_once(
        loss_scaled: bool) -> None:
    """session._create_slots: Adam's moments made before fit, so the train step's tf.function
    creates no variable in its first trace and is not traced a second time (it was, twice);
    through a LossScaleOptimizer (mixed_float16 on a GPU) too."""
    from payloads.runtime.session import _create_slots

    m = user_model.build(MLP, {"units": 16, "dropout": 0.0}, (10,))
    opt = user_model.optimizer("adam", 1e-3)
    if loss_scaled:
        opt = tf.keras.mixed_precision.LossScaleOptimizer(opt)
    m.compile(optimizer=opt, loss="binary_crossentropy")
    inner = opt.inner_optimizer if loss_scaled else opt
    assert not inner.variables()  # Keras makes them in the first step
    _create_slots(m)
    assert {"m", "v"} <= set(inner.get_slot_names())
    assert all(inner.get_slot(v, "m") is not None for v in m.trainable_variables)
    x = np.random.default_rng(1).normal(size=(256, 10)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.float32)
    hist = m.fit(x, y, batch_size=64, epochs=2, verbose=0)
    assert np.isfinite(hist.history["loss"]).all() and hist.history["loss"][1] < hist.history["loss"][0]
    assert m.train_function.experimental_get_tracing_count() == 1

def _figs(**training: object):
    from payloads.runtime.core import ValidationFigures
    from payloads.runtime.trial import Data, Training, TrialDoc

    cfg = TrialDoc(study="s", trial_id=1, trial_number=0, hparams={}, model_file=Path("m.py"),
                   training=Training(metrics=("auc", "rejection_at_50"), **training),  # type: ignore[arg-type]
                   data=Data(), output_dir=Path("."))
    return ValidationFigures(cfg, "probability", None, [])


@pytest.mark.parametrize("classes", [2, 3])
def test_keras_validation_histograms_equal_the_numpy_ones(classes: int) -> None:
    """The histogram the wrapped Keras test_step fills equals figures.histograms of the same
    weighted scores (binary probabilities, or softmax with a discriminant)."""
    from payloads.runtime import keras_figures

    rng = np.random.default_rng(3)
    n = 5000
    disc = {"signal": 0, "background": [1, 2], "fractions": {1: 0.3}} if classes == 3 else None
    fig = _figs(discriminant=disc)
    if classes == 2:
        y = (rng.random(n) < 0.5).astype(np.float32)
        p = (1 / (1 + np.exp(-rng.normal(y * 2 - 1, 1.0)))).astype(np.float32)[:, None]
    else:
        y = np.eye(3, dtype=np.float32)[rng.integers(0, 3, n)]
        z = rng.normal(size=(n, 3)) + 2 * y
        p = (np.exp(z) / np.exp(z).sum(1, keepdims=True)).astype(np.float32)
    w = rng.uniform(-0.2, 1.5, n).astype(np.float32)
    hist = keras_figures.Histogram(fig, 1 if classes == 2 else 3)
    for lo in range(0, n, 1000):
        hist.update(tf.constant(y[lo:lo + 1000]), tf.constant(p[lo:lo + 1000]),
                    tf.constant(w[lo:lo + 1000]))
    got = hist.var.numpy().reshape(hist.k, -1)
    want = fig.histograms(p, y, w)
    assert np.abs(got - want).sum() < 1e-3 * np.abs(want).sum()
    a, b = fig.metrics(got, None), fig.metrics(want, None)
    assert a["val_rejection_at_50"] == pytest.approx(b["val_rejection_at_50"], rel=1e-3)
    hist.reset()
    assert hist.var.numpy().sum() == 0


def test_a_metric_name_nobody_knows_needs_the_hook() -> None:
    import types

    from payloads.runtime.core import metric_hook
    from payloads.runtime.trial import Data, Training, TrialDoc

    cfg = TrialDoc(study="s", trial_id=1, trial_number=0, hparams={}, model_file=Path("m.py"),
                   training=Training(metrics=("accuracy", "rejection_at_30", "sig_eff")),
                   data=Data(), output_dir=Path("."))
    with pytest.raises(PayloadFailure, match="'sig_eff' is not known.*define metrics"):
        metric_hook(cfg, types.SimpleNamespace(), ("accuracy",))
    module = types.SimpleNamespace(metrics=lambda y, s, w: {"sig_eff": 0.5})
    hook, from_hook, framework = metric_hook(cfg, module, ("accuracy",))
    assert hook is module.metrics and from_hook == ["sig_eff"] and framework == ["accuracy"]
