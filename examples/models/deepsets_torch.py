"""Example PyTorch model file: jet features, and optionally the jet's tracks (deep sets).

``payload: {framework: torch, model: models/deepsets_torch.py}``. gridml calls
``build_model(hparams, input_shape)`` and trains the returned ``torch.nn.Module`` under torchrun
(DistributedDataParallel). ``input_shape`` is ``(10,)`` with ``data.features: x``, or
``((10,), (None, 2))`` with ``features: [x, tracks]`` and ``ragged: [tracks]``: then ``forward``
gets ``(jet, tracks)``, tracks padded with 0.0 to the longest jet of the batch.

The model returns a logit (no sigmoid): with ``loss: binary_crossentropy`` gridml applies the
sigmoid inside the loss and for the metrics. ``adapt`` (optional) is called once with the first
``training.adapt_samples`` training rows of each feature (None for a ragged one), the same rows
on every rank: here it sets the input standardisation, kept as buffers (saved in model.pt and
model.onnx).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import nn

ACTIVATIONS = {"relu": nn.ReLU, "elu": nn.ELU, "tanh": nn.Tanh, "gelu": nn.GELU}


class DeepSets(nn.Module):
    def __init__(self, n_jet: int, n_track: int | None, units: int, dropout: float,
                 activation: str) -> None:
        super().__init__()
        act = ACTIVATIONS[activation]
        self.register_buffer("mean", torch.zeros(n_jet))
        self.register_buffer("std", torch.ones(n_jet))
        self.phi = (nn.Sequential(nn.Linear(n_track, units), act(), nn.Linear(units, units), act())
                    if n_track else None)  # per track; summed over the jet's tracks
        self.head = nn.Sequential(nn.Linear(n_jet + (units if n_track else 0), units), act(),
                                  nn.Dropout(dropout), nn.Linear(units, units), act(),
                                  nn.Linear(units, 1))

    def adapt(self, samples: list[Any]) -> None:
        jet = np.asarray(samples[0], dtype=np.float64)
        self.mean.copy_(torch.as_tensor(jet.mean(0), dtype=torch.float32))
        self.std.copy_(torch.as_tensor(jet.std(0) + 1e-6, dtype=torch.float32))

    def forward(self, jet: torch.Tensor, tracks: torch.Tensor | None = None) -> torch.Tensor:
        h = (jet - self.mean) / self.std
        if self.phi is not None and tracks is not None:
            mask = (tracks.abs().sum(-1, keepdim=True) > 0).to(h.dtype)  # padding is all zeros
            t = (self.phi(tracks) * mask).sum(1) / mask.sum(1).clamp(min=1.0)  # masked mean
            h = torch.cat([h, t], dim=-1)
        return self.head(h)


def build_model(hparams: dict[str, Any], input_shape: Any) -> nn.Module:
    if isinstance(input_shape[0], tuple):  # several features: (jet shape, tracks shape)
        jet_shape, track_shape = input_shape
        n_track = int(track_shape[-1])
    else:
        jet_shape, n_track = input_shape, None
    return DeepSets(int(jet_shape[0]), n_track, int(hparams.get("units", 32)),
                    float(hparams.get("dropout", 0.0)), str(hparams.get("activation", "relu")))
