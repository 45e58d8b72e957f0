"""The PyTorch side of the user's model file: build_model, its optional hooks, and the names of
the spec (loss, metrics, optimizer) mapped to PyTorch with the meaning they have for Keras.

Imports torch only (never TensorFlow or Horovod). The model returns *logits* for the
cross-entropy losses: gridml applies the sigmoid/softmax inside the loss (numerically stable and
safe under autocast, where ``BCELoss`` is refused) and for the metrics.

Hooks a model file may define beside ``build_model(hparams, input_shape) -> torch.nn.Module``:

* ``loss(outputs, labels) -> Tensor``: replaces the named ``training.loss`` (train and validation);
* ``training_step(model, batch, loss_fn) -> Tensor | (Tensor, outputs)``: one step's loss, with
  ``batch = (features, labels)`` already on the device; gridml runs backward, gradient
  all-reduce, the optimizer and the AMP scaler. Return ``(loss, outputs)`` to keep training
  metrics other than the loss.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any
from collections.abc import Callable

import torch

from payloads.runtime.errors import PayloadFailure
from payloads.runtime.userfile import import_model_file

HOOKS = {"loss": 2, "training_step": 3}  # name -> positional arity (gridml/spec/checks.py too)
LOSSES = ("binary_crossentropy", "categorical_crossentropy", "sparse_categorical_crossentropy",
          "mse", "mean_squared_error", "mae", "mean_absolute_error")
METRICS = ("accuracy", "auc", "precision", "recall")
DEFER = 16  # batches counted at once on a GPU (Metrics)
AUC_BINS = 4096  # histogram of scores: AUC exact up to ties within 1/4096 in probability


@dataclass
class UserModel:
    module: ModuleType
    build: Callable[..., Any]
    loss: Callable[..., Any] | None
    training_step: Callable[..., Any] | None


def load(path: Path) -> UserModel:
    """Import the user's file by path: ``build_model`` and the optional hooks."""
    module, fn = import_model_file(path)
    hooks = {n: getattr(module, n, None) for n in HOOKS}
    for name, fn_ in hooks.items():
        if fn_ is not None and not callable(fn_):
            raise PayloadFailure(f"model file {path}: {name} is not a function; define "
                                 f"{name}({', '.join(_hook_args(name))}) or remove it", code=2)
    return UserModel(module, fn, hooks["loss"], hooks["training_step"])


def _hook_args(name: str) -> list[str]:
    return {"loss": ["outputs", "labels"], "training_step": ["model", "batch", "loss_fn"]}[name]


def build(user: UserModel, path: Path, hparams: dict[str, Any], input_shape: Any) -> torch.nn.Module:
    model = user.build(dict(hparams), input_shape)
    if not isinstance(model, torch.nn.Module):
        raise PayloadFailure(f"model file {path}: build_model returned {type(model).__name__}, "
                             "not a torch.nn.Module (payload.framework is torch)", code=2)
    return model


def rebuild(model_pt: str | Path, model_file: str | Path | None = None) -> torch.nn.Module:
    """The trained model from an output folder's ``model.pt`` (and its ``model_source.py``;
    fetched files keep their prefix: ``<prefix>model.pt`` beside ``<prefix>model_source.py``)."""
    model_pt = Path(model_pt)
    blob = torch.load(model_pt, map_location="cpu", weights_only=False)
    src = Path(model_file) if model_file else model_pt.parent / blob["model_source"]
    if not model_file and not src.is_file() and model_pt.name.endswith("model.pt"):
        prefix = model_pt.name[:-len("model.pt")]
        src = model_pt.parent / f"{prefix}{blob['model_source']}"
    model = build(load(src), src, blob["hparams"], blob["input_shape"])
    model.load_state_dict(blob["state_dict"])
    return model.eval()


# ---- loss ------------------------------------------------------------------------------------
def _align(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Labels shaped like the outputs ((B,) labels with (B, 1) outputs and the reverse)."""
    return y.reshape(out.shape).to(out.dtype) if y.numel() == out.numel() else y.to(out.dtype)


def loss_fn(name: str) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """``training.loss`` as a function of (logits or outputs, labels), mean over the batch."""
    F = torch.nn.functional
    key = str(name).lower()
    if key == "binary_crossentropy":
        return lambda out, y: F.binary_cross_entropy_with_logits(out.float(), _align(out.float(), y))
    if key == "categorical_crossentropy":  # one-hot (or soft) labels, as in Keras
        return lambda out, y: F.cross_entropy(out.float(), y.reshape(out.shape).float())
    if key == "sparse_categorical_crossentropy":
        return lambda out, y: F.cross_entropy(out.float(), y.reshape(-1).long())
    if key in ("mse", "mean_squared_error"):
        return lambda out, y: F.mse_loss(out.float(), _align(out.float(), y))
    if key in ("mae", "mean_absolute_error"):
        return lambda out, y: F.l1_loss(out.float(), _align(out.float(), y))
    raise PayloadFailure(f"training.loss '{name}' is not known to the torch payload; use one of "
                         f"{', '.join(LOSSES)}, or define loss(outputs, labels) in the model file",
                         code=2)


def event_loss_fn(name: str) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """``training.loss`` per event, (B,): what event weights multiply (data.weights)."""
    F = torch.nn.functional
    key = str(name).lower()

    def per_event(t: torch.Tensor) -> torch.Tensor:
        return t.reshape(t.shape[0], -1).mean(1) if t.ndim > 1 else t

    if key == "binary_crossentropy":
        return lambda out, y: per_event(F.binary_cross_entropy_with_logits(
            out.float(), _align(out.float(), y), reduction="none"))
    if key == "categorical_crossentropy":
        return lambda out, y: F.cross_entropy(out.float(), y.reshape(out.shape).float(),
                                              reduction="none")
    if key == "sparse_categorical_crossentropy":
        return lambda out, y: F.cross_entropy(out.float(), y.reshape(-1).long(), reduction="none")
    if key in ("mse", "mean_squared_error"):
        return lambda out, y: per_event(F.mse_loss(out.float(), _align(out.float(), y),
                                                   reduction="none"))
    if key in ("mae", "mean_absolute_error"):
        return lambda out, y: per_event(F.l1_loss(out.float(), _align(out.float(), y),
                                                  reduction="none"))
    loss_fn(name)  # raises the one-line error
    raise AssertionError(name)


def weighted(loss: torch.Tensor, w: torch.Tensor, where: str) -> torch.Tensor:
    """mean(loss x w) of per-event losses (B,) and weights (B,); a scalar loss (a loss hook
    that averages) cannot take weights: one line saying so."""
    if loss.ndim == 0 or loss.numel() != w.numel():
        raise PayloadFailure(f"{where} returned a loss of shape {tuple(loss.shape)}; with "
                             "data.weights it must return one loss per event (B,), which gridml "
                             "weights and averages", code=2)
    return (loss.reshape(-1).float() * w.reshape(-1).float()).mean()


# ---- optimizer -------------------------------------------------------------------------------
def optimizer(name: str, params: Any, lr: float, hparams: dict[str, Any]) -> torch.optim.Optimizer:
    """Keras' defaults where they differ from PyTorch's (epsilon 1e-7, RMSprop rho 0.9,
    AdamW weight decay 0.004; ``hparams.weight_decay`` overrides the last)."""
    key = str(name).lower()
    o = torch.optim
    if key == "adam":
        return o.Adam(params, lr=lr, eps=1e-7)
    if key == "adamw":
        return o.AdamW(params, lr=lr, eps=1e-7, weight_decay=float(hparams.get("weight_decay", 0.004)))
    if key == "sgd":
        return o.SGD(params, lr=lr, momentum=float(hparams.get("momentum", 0.0)))
    if key == "rmsprop":
        return o.RMSprop(params, lr=lr, alpha=0.9, eps=1e-7)
    if key == "adagrad":
        return o.Adagrad(params, lr=lr, initial_accumulator_value=0.1, eps=1e-7)
    if key == "nadam":
        return o.NAdam(params, lr=lr, eps=1e-7)
    if key == "adamax":
        return o.Adamax(params, lr=lr, eps=1e-7)
    raise PayloadFailure(f"training.optimizer '{name}' is not one of adam, adamw, sgd, rmsprop, "
                         "adagrad, nadam, adamax", code=2)


# ---- metrics: sums and counts, all-reduced over ranks -----------------------------------------
def score_histograms(hist: torch.Tensor, idx: torch.Tensor, truth: torch.Tensor,
                     weights: torch.Tensor, sync_free: bool) -> None:
    """Add a batch's weighted scores to ``hist`` (row 0 positives, row 1 negatives; ``idx`` the
    score bins). ``sync_free`` (on a GPU): one ``index_add_`` into the flat histogram, with no
    host sync. A boolean mask's size and ``bincount``'s length each wait for the GPU: with them
    every training step waited for its own kernels (half a plain loop's samples/s on an H200).
    Its float additions come in any order (atomics), so with deterministic algorithms on, or on
    a CPU, ``bincount`` per class."""
    if sync_free:
        hist.view(-1).index_add_(0, idx + (~truth).long() * hist.shape[1], weights.to(hist.dtype))
        return
    hist[0] += torch.bincount(idx[truth], weights=weights[truth], minlength=hist.shape[1])
    hist[1] += torch.bincount(idx[~truth], weights=weights[~truth], minlength=hist.shape[1])


class Metrics:
    """Running sums of one pass (train or validation) on the device: the loss, correct
    predictions, binary counts and the score histograms of positives and negatives. ``reduce``
    adds them over ranks with one all_reduce; AUC comes from the summed histograms (the
    trapezoid over 4096 thresholds, as Keras' AUC does over 200)."""

    def __init__(self, names: list[str], loss: str, device: torch.device) -> None:
        from payloads.runtime.figures import is_figure

        names = [n for n in names if n.lower() == "auc" or not is_figure(n)]
        unknown = [n for n in names if n.lower() not in METRICS]
        if unknown:
            raise PayloadFailure(f"training.metrics: '{unknown[0]}' is not known to the torch "
                                 f"payload; use {', '.join(METRICS)}", code=2)
        self.names = [n.lower() for n in names]
        self.loss = str(loss).lower()
        self.logits = self.loss in ("binary_crossentropy", "categorical_crossentropy",
                                    "sparse_categorical_crossentropy")
        self.device = device
        # [loss_sum, n, correct, tp, fp, fn, n_metric] then hist_pos, hist_neg
        self.sums = torch.zeros(7, dtype=torch.float64, device=device)
        self.hist = torch.zeros(2, AUC_BINS, dtype=torch.float64, device=device)
        # On a GPU the batches' (loss, out, y, w) wait here and are counted DEFER at a time:
        # the ~30 small operations of a count cost host time per batch that a small model's
        # step does not hide (each launch is as dear as a tiny kernel). Counted in one go, the
        # sums are the same. On a CPU a batch is a view of a recycled buffer: counted at once.
        self.defer = DEFER if device.type == "cuda" else 1
        self._pending: list[tuple[torch.Tensor, torch.Tensor | None, torch.Tensor,
                                  torch.Tensor | None]] = []

    def _scores(self, out: torch.Tensor) -> torch.Tensor:
        if self.loss in ("categorical_crossentropy", "sparse_categorical_crossentropy"):
            return torch.softmax(out, dim=-1)
        return torch.sigmoid(out) if self.logits else out

    @torch.no_grad()
    def update(self, loss: torch.Tensor, out: torch.Tensor | None, y: torch.Tensor,
               w: torch.Tensor | None = None) -> None:
        """One batch: ``loss`` its mean loss (with event weights ``w``: the weighted mean
        sum(l w) / sum(w)); every metric is weighted by ``w`` when given."""
        item = (loss.detach(), out.detach() if out is not None else None, y,
                w.detach() if w is not None else None)
        if self._pending and not self._same_kind(self._pending[0], item):
            self.flush()
        self._pending.append(item)
        if len(self._pending) >= self.defer:
            self.flush()

    @staticmethod
    def _same_kind(a: tuple, b: tuple) -> bool:
        """Batches counted together: the same size, both with or without outputs and weights."""
        return (a[2].shape == b[2].shape and (a[1] is None) == (b[1] is None)
                and (a[3] is None) == (b[3] is None)
                and (a[1] is None or a[1].shape == b[1].shape))

    @torch.no_grad()
    def flush(self) -> None:
        """Count the batches waiting (all of one size: see ``_same_kind``)."""
        if not self._pending:
            return
        batch, self._pending = self._pending, []
        k, n = len(batch), batch[0][2].shape[0]
        losses = torch.stack([b[0].reshape(()) for b in batch]).double()
        y = batch[0][2] if k == 1 else torch.cat([b[2] for b in batch])
        ws = [b[3] for b in batch if b[3] is not None]  # all or none (_same_kind)
        wn = torch.cat(ws).double().reshape(-1) if ws else None
        if wn is not None:  # each batch's mean loss x its weight sum
            self.sums[0] += (losses * wn.reshape(k, -1).sum(1)).sum()
            self.sums[1] += wn.sum()
        else:
            self.sums[0] += losses.sum() * n
            self.sums[1] += k * n
        if batch[0][1] is None or not self.names:
            return
        outs = [b[1] for b in batch if b[1] is not None]
        out = (outs[0] if k == 1 else torch.cat(outs)).float()
        self._count(out, y, wn)

    def _count(self, out: torch.Tensor, y: torch.Tensor, wn: torch.Tensor | None) -> None:
        """The metric sums and score histograms of ``out`` against ``y`` (weights ``wn``)."""
        n = y.shape[0]
        p = self._scores(out)
        multi = p.ndim > 1 and p.shape[-1] > 1
        ev = wn if wn is not None else torch.ones(n, dtype=torch.float64, device=p.device)
        if multi:  # one-hot/probability labels or class indices -> one-hot
            labels = (torch.nn.functional.one_hot(y.reshape(-1).long(), p.shape[-1]).float()
                      if y.numel() == n else y.reshape(p.shape).float())
            self.sums[2] += ((p.argmax(-1) == labels.argmax(-1)).double() * ev).sum()
        else:
            labels = y.reshape(p.shape).float()
            pred, truth = p > 0.5, labels > 0.5
            ew = ev.reshape(n, *([1] * (p.ndim - 1))).expand(p.shape) if p.ndim else ev
            self.sums[2] += ((pred == truth).double() * ew).sum()
            self.sums[3] += ((pred & truth).double() * ew).sum()
            self.sums[4] += ((pred & ~truth).double() * ew).sum()
            self.sums[5] += ((~pred & truth).double() * ew).sum()
        self.sums[6] += (ev.sum() * (p.numel() // max(1, n))) if not multi else ev.sum()
        if "auc" in self.names:  # micro-averaged over classes for one-hot labels, as Keras' AUC
            flat, truth = p.reshape(-1).clamp(0, 1), labels.reshape(-1) > 0.5
            fw = ev.repeat_interleave(max(1, flat.numel() // max(1, n)))
            idx = (flat * (AUC_BINS - 1)).round().long()
            score_histograms(self.hist, idx, truth, fw,
                             flat.is_cuda and not torch.are_deterministic_algorithms_enabled())

    def reduce(self, all_reduce: Callable[[torch.Tensor], Any] | None) -> dict[str, float]:
        """Sums over ranks (``all_reduce``: in-place SUM, or None for one rank) -> metrics."""
        self.flush()
        flat = torch.cat([self.sums, self.hist.reshape(-1)])
        if all_reduce is not None:
            all_reduce(flat)
        flat = flat.cpu()
        s, hist = flat[:7].tolist(), flat[7:].reshape(2, AUC_BINS)
        out = {"loss": s[0] / s[1] if s[1] else float("nan")}
        for name in self.names:
            if name == "accuracy":
                out[name] = s[2] / s[6] if s[6] else float("nan")
            elif name == "precision":
                out[name] = s[3] / (s[3] + s[4]) if s[3] + s[4] else 0.0
            elif name == "recall":
                out[name] = s[3] / (s[3] + s[5]) if s[3] + s[5] else 0.0
            elif name == "auc":
                out[name] = auc_from_histograms(hist[0].numpy(), hist[1].numpy())
        return out


def auc_from_histograms(pos: Any, neg: Any) -> float:
    """ROC AUC from score histograms (bins in increasing score): P(score+ > score-), ties half."""
    n_pos, n_neg = float(pos.sum()), float(neg.sum())
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    neg_below = neg.cumsum() - neg
    total = float((pos * (neg_below + 0.5 * neg)).sum())
    value = total / (n_pos * n_neg)
    return value if math.isfinite(value) else float("nan")
