"""A starter model file for gridml (PyTorch), written by `gridml init --framework torch`: edit it.

gridml imports this file on every rank and calls ``build_model(hparams, input_shape)``: ``hparams``
is the trial's point of ``search.space`` (here learning_rate, units, dropout, activation; the
payload uses learning_rate for the optimizer), ``input_shape`` the shape of one sample of
``data.features``. Return a ``torch.nn.Module``; the payload trains it under torchrun
(DistributedDataParallel). Return logits: with ``loss: binary_crossentropy`` the payload applies
the sigmoid inside the loss and for the metrics.

``adapt`` (optional) gets the first ``training.adapt_samples`` training rows of each feature, the
same on every rank, before the first epoch: here the input standardisation, kept as buffers so it
travels with model.pt and model.onnx.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import nn


class StarterMLP(nn.Module):
    shift: torch.Tensor  # buffers: saved with the weights
    scale: torch.Tensor

    def __init__(self, n_in: int, width: int, drop: float, act: type[nn.Module]) -> None:
        super().__init__()
        self.register_buffer("shift", torch.zeros(n_in))
        self.register_buffer("scale", torch.ones(n_in))
        self.net = nn.Sequential(nn.Linear(n_in, width), act(), nn.Dropout(drop),
                                 nn.Linear(width, width), act(), nn.Dropout(drop),
                                 nn.Linear(width, 1))

    def adapt(self, samples: list[Any]) -> None:
        rows = np.asarray(samples[0], dtype=np.float64).reshape(len(samples[0]), -1)
        self.shift.copy_(torch.as_tensor(rows.mean(axis=0), dtype=torch.float32))
        self.scale.copy_(torch.as_tensor(rows.std(axis=0) + 1e-6, dtype=torch.float32))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net((x.flatten(1) - self.shift) / self.scale)


def build_model(hparams: dict[str, Any], input_shape: tuple[int, ...]) -> nn.Module:
    act = {"relu": nn.ReLU, "elu": nn.ELU, "tanh": nn.Tanh}[str(hparams.get("activation", "relu"))]
    return StarterMLP(int(np.prod(input_shape)), int(hparams.get("units", 64)),
                      float(hparams.get("dropout", 0.0)), act)
