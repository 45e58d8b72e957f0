"""A ParticleNet-style tagger, written as ``build_model`` only (examples/physics/spec.yaml).

The spec's ``data.inputs`` hands the model ``(points, features, mask)`` as ParticleNet takes them:
``points`` (B, L, 2) are the tracks' (Δη, Δφ) channels, ``tracks`` (B, L, 4) every channel
(Δη, Δφ, log pT, charge) and ``tracks_mask`` (B, L) uint8, 1 for a real track. ``input_shape``
is the tuple of their per-jet shapes. Instead of ParticleNet's EdgeConv blocks (k nearest
neighbours in ``points``) this tiny stand-in runs a per-track MLP on the points and features
and pools it with a masked mean; a real ParticleNet (e.g. weaver-core's) takes the same three
inputs. It returns one logit per jet (no sigmoid): gridml applies it inside the loss and records
``logit`` in model.onnx's metadata.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn


class PointTagger(nn.Module):
    def __init__(self, n_points: int, n_features: int, units: int) -> None:
        super().__init__()
        self.per_track = nn.Sequential(nn.Linear(n_points + n_features, units), nn.ReLU(),
                                       nn.Linear(units, units), nn.ReLU())
        self.head = nn.Sequential(nn.Linear(units, units), nn.ReLU(), nn.Linear(units, 1))

    def forward(self, points: torch.Tensor, features: torch.Tensor,
                mask: torch.Tensor) -> torch.Tensor:
        m = mask.unsqueeze(-1).to(features.dtype)                    # (B, L, 1)
        h = self.per_track(torch.cat([points, features], dim=-1)) * m
        pooled = h.sum(1) / m.sum(1).clamp(min=1.0)                  # masked mean over tracks
        return self.head(pooled)                                     # (B, 1) logit


def build_model(hparams: dict[str, Any], input_shape: Any) -> nn.Module:
    points, features, _mask = input_shape                            # (L, 2), (L, 4), (L,)
    return PointTagger(int(points[-1]), int(features[-1]), int(hparams.get("units", 16)))
