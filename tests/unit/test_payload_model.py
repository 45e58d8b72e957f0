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
