"""The user's model file (loaded by path), its normalisation, optimizer and compile arguments."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from payloads.runtime.errors import PayloadFailure
from payloads.runtime.userfile import import_model_file

OPTIMIZERS = {"adam": "Adam", "sgd": "SGD", "rmsprop": "RMSprop", "adagrad": "Adagrad",
              "nadam": "Nadam", "adamax": "Adamax"}


def load_build_model(path: Path) -> Any:
    """Import the user's file by path and return its ``build_model`` function."""
    return import_model_file(path)[1]


def build(path: Path, hparams: dict[str, Any], input_shape: Any) -> Any:
    from tensorflow import keras

    model = load_build_model(path)(dict(hparams), input_shape)
    if not isinstance(model, keras.Model):
        raise PayloadFailure(not_a_keras_model(path, model), code=2)
    return model


def not_a_keras_model(path: Path, model: Any) -> str:
    """Why ``model`` is refused, in one line with the fix; a model of the standalone
    ``tf_keras`` package (or of Keras 3) is named as such."""
    kind = type(model)
    origin = (kind.__module__ or "").split(".", 1)[0]
    if origin == "tf_keras":
        return (f"model file {path}: build_model returned a tf_keras {kind.__name__} (the "
                "standalone tf_keras package), not a keras.Model of the payload's TensorFlow; "
                "build it with tensorflow.keras (`from tensorflow import keras`, Keras 2.15, as "
                "the payload does) instead of tf_keras")
    if origin == "keras" and not kind.__module__.startswith(("keras.src.engine", "keras.engine")):
        return (f"model file {path}: build_model returned a Keras 3 {kind.__name__} "
                f"({kind.__module__}), not a keras.Model of the payload's TensorFlow (Keras "
                "2.15); build it with tensorflow.keras (`from tensorflow import keras`)")
    return (f"model file {path}: build_model returned {kind.__name__}, not a keras.Model "
            "(payload.framework is keras): return the model built with tensorflow.keras")


def adapt_normalization(model: Any, samples: list[Any], names: list[str] | None = None) -> int:
    """Adapt every not-yet-adapted Normalization layer fed directly by a model input.

    ``samples[i]`` holds rows of the data for ``model.inputs[i]`` (None: a ragged input,
    skipped), or, with ``names``, for the input named ``names[i]``: a model built on a dict of
    ``keras.Input``s lists them in ``model.inputs`` sorted by name, not in the data's order.
    They are the first rows of the training files, the same on every rank, so all
    ranks get identical statistics without communicating. Returns how many were adapted.
    """
    from tensorflow import keras

    by_name = dict(zip(names or [], samples))
    n = 0
    for layer in model.layers:
        if not isinstance(layer, keras.layers.Normalization) or layer.is_adapted:
            continue
        fed_by = [i for i, t in enumerate(model.inputs) if t is layer.input]
        if not fed_by:
            continue
        name = str(getattr(model.inputs[fed_by[0]], "name", "")).split(":")[0]
        rows = (by_name[name] if name in by_name
                else samples[fed_by[0]] if fed_by[0] < len(samples) else None)
        if rows is not None:
            layer.adapt(np.asarray(rows, dtype=np.float32), batch_size=4096)
            n += 1
    return n


def optimizer(name: str, learning_rate: float) -> Any:
    from tensorflow import keras

    cls = OPTIMIZERS.get(str(name).lower())
    if cls is None:
        raise PayloadFailure(f"training.optimizer '{name}' is not one of {sorted(OPTIMIZERS)}",
                             code=2)
    return getattr(keras.optimizers.legacy, cls)(learning_rate=learning_rate)


def scaled_lr(lr: float, ranks: int, rule: str) -> float:
    """Linear scaling (Goyal et al. 2017): the global batch grows with ranks, so does the lr."""
    return lr * ranks if rule == "linear" else lr


def metric_objects(names: list[str], loss: str) -> list[Any]:
    """Keras metrics by name, with stable names (``auc``, not ``auc_1``)."""
    from tensorflow import keras

    binary = loss == "binary_crossentropy"
    table = {"auc": lambda: keras.metrics.AUC(name="auc"),
             "accuracy": lambda: keras.metrics.BinaryAccuracy(name="accuracy") if binary
             else "accuracy",
             "precision": lambda: keras.metrics.Precision(name="precision"),
             "recall": lambda: keras.metrics.Recall(name="recall")}
    return [table[n]() if n in table else n for n in names]
