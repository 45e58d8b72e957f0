"""A starter model file for gridml (Keras), written by `gridml init`: edit it freely.

gridml imports this file on every rank and calls ``build_model(hparams, input_shape)``: ``hparams``
is the trial's point of ``search.space`` (here learning_rate, units, dropout, activation; the
payload uses learning_rate for the optimizer), ``input_shape`` the shape of one sample of
``data.features``. Return an uncompiled ``keras.Model``: the payload compiles it with
``training.loss`` and ``training.metrics`` and Horovod's distributed optimizer.

A ``keras.layers.Normalization`` layer is adapted by the payload on a fixed sample of the training
data before the first epoch, so raw physics features (GeV, counts) arrive standardised.
"""

from __future__ import annotations

from typing import Any

from tensorflow import keras


def build_model(hparams: dict[str, Any], input_shape: tuple[int, ...]) -> keras.Model:
    act = str(hparams.get("activation", "relu"))
    width, drop = int(hparams.get("units", 64)), float(hparams.get("dropout", 0.0))
    layers: list[keras.layers.Layer] = [keras.Input(shape=tuple(input_shape)),
                                        keras.layers.Normalization()]
    for _ in range(2):
        layers += [keras.layers.Dense(width, activation=act), keras.layers.Dropout(drop)]
    # a float32 sigmoid: one probability per sample (binary_crossentropy), stable in mixed precision
    layers.append(keras.layers.Dense(1, activation="sigmoid", dtype="float32"))
    return keras.Sequential(layers, name="starter_mlp")
