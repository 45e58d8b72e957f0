"""The Keras tagger of examples/physics/spec_keras.yaml: two inputs, the jet's features ``x``
(B, 3) and its ``tracks`` (B, L, 4) with their mask ``tracks_mask`` (B, L) (a collection is
always followed by its mask). The ``keras.Input`` names are the spec's ``data.inputs`` names;
``input_shape`` is the tuple of their per-jet shapes in that order. Output: a probability
(sigmoid), recorded as ``probability`` in model.onnx's metadata.
"""

from __future__ import annotations

from typing import Any

from tensorflow import keras


def build_model(hparams: dict[str, Any], input_shape: Any) -> keras.Model:
    jets_shape, tracks_shape, mask_shape = input_shape
    units = int(hparams.get("units", 16))
    jets = keras.Input(jets_shape, name="x")
    tracks = keras.Input(tracks_shape, name="tracks")
    mask = keras.Input(mask_shape, name="tracks_mask")
    m = keras.layers.Lambda(lambda a: keras.backend.cast(a, "float32")[..., None])(mask)
    h = keras.layers.Dense(units, activation="relu")(tracks)
    h = keras.layers.Dense(units, activation="relu")(h)
    pooled = keras.layers.Lambda(
        lambda a: keras.backend.sum(a[0] * a[1], 1) / keras.backend.maximum(keras.backend.sum(a[1], 1), 1.0)
    )([h, m])
    z = keras.layers.Concatenate()([keras.layers.Normalization()(jets), pooled])
    z = keras.layers.Dense(units, activation="relu")(z)
    out = keras.layers.Dense(1, activation="sigmoid")(z)
    return keras.Model({"x": jets, "tracks": tracks, "tracks_mask": mask}, out)
