"""Example user model file: a multilayer perceptron for the tau-vs-jet toy.

gridml calls ``build_model(hparams, input_shape)`` on every Horovod rank; the payload compiles the
model (loss, metrics, distributed optimizer), so only the architecture lives here.

The first layer is ``keras.layers.Normalization``: the payload adapts every not-yet-adapted
Normalization layer on a fixed sample of the training data (identical on all ranks) before
training, so raw physics features (pt in GeV, counts, widths) reach the network standardised.
"""

from __future__ import annotations

from typing import Any

from tensorflow import keras


def build_model(hparams: dict[str, Any], input_shape: tuple[int, ...]) -> keras.Model:
    """Dense stack: ``n_layers`` x (``units``, ``activation``, ``dropout``), sigmoid output."""
    units = int(hparams.get("units", 64))
    dropout = float(hparams.get("dropout", 0.0))
    activation = str(hparams.get("activation", "relu"))
    inputs = keras.Input(shape=tuple(input_shape), name="features")
    h = keras.layers.Normalization(name="normalize")(inputs)
    for i in range(int(hparams.get("n_layers", 2))):
        h = keras.layers.Dense(units, activation=activation, name=f"dense_{i}")(h)
        if dropout > 0:
            h = keras.layers.Dropout(dropout, name=f"dropout_{i}")(h)
    # float32 output keeps the sigmoid/cross-entropy stable under mixed precision.
    outputs = keras.layers.Dense(1, activation="sigmoid", dtype="float32", name="tau_prob")(h)
    return keras.Model(inputs, outputs, name="tau_mlp")
