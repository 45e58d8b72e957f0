"""Example user model file with a variable-length input: jet features plus the jet's tracks.

Spec: ``data: {features: [x, tracks], ragged: [tracks]}``. The payload passes
``input_shape = ((10,), (None, 2))``: a fixed vector and a padded track list (B, L, 2) whose
length L is the longest jet of the batch (``training.bucket_by_length`` keeps it short).
Padding is 0.0 (``training.pad_value``); a Masking layer hides it from the per-track network
and the masked average, a deep-sets style permutation-invariant summary of the tracks.
"""

from __future__ import annotations

from typing import Any

from tensorflow import keras


def build_model(hparams: dict[str, Any], input_shape: tuple[tuple[int | None, ...], ...]
                ) -> keras.Model:
    units = int(hparams.get("units", 32))
    activation = str(hparams.get("activation", "relu"))
    jet_shape, track_shape = input_shape
    jet = keras.Input(shape=jet_shape, name="jet")
    tracks = keras.Input(shape=track_shape, name="tracks")
    t = keras.layers.Masking(mask_value=0.0)(tracks)
    t = keras.layers.TimeDistributed(keras.layers.Dense(units, activation=activation))(t)
    t = keras.layers.GlobalAveragePooling1D()(t)  # respects the mask: padding is not averaged
    j = keras.layers.Normalization(name="normalize")(jet)
    h = keras.layers.Concatenate()([j, t])
    h = keras.layers.Dense(units, activation=activation)(h)
    h = keras.layers.Dropout(float(hparams.get("dropout", 0.0)))(h)
    out = keras.layers.Dense(1, activation="sigmoid", dtype="float32")(h)
    return keras.Model([jet, tracks], out, name="tau_deepsets")
