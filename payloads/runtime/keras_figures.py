"""The Keras half of the figures of merit and event weights (the neutral half is
payloads/runtime/core.py and figures.py).

- :func:`install`: the model's ``test_step`` also adds each validation batch's weighted
  per-class histogram of the discriminant to a variable (in the compiled step: no extra pass
  over the data, nothing during training steps);
- :class:`FiguresCallback`: after each epoch, every rank sums the histograms (one Horovod
  all-reduce), rank 0 turns them into ``val_rejection_at_NN``/``val_auc`` (replacing Keras' own
  per-rank AUC, which Horovod would only average) and, with a ``metrics`` hook in the model
  file, runs it on every rank's validation scores (a prediction pass, gathered);
- :func:`weighted_dataset`: the training weights (event weight x class factor x scale).
"""

from __future__ import annotations

from typing import Any
from collections.abc import Callable

import numpy as np
import tensorflow as tf
from tensorflow import keras

from payloads.runtime import figures
from payloads.runtime.core import ValidationFigures


class Histogram:
    """A (classes, BINS) float64 variable filled by the wrapped ``test_step``."""

    def __init__(self, fig: ValidationFigures, n_outputs: int) -> None:
        fig.setup(n_outputs)
        assert fig.disc is not None
        self.fig, self.n_outputs, self.k = fig, n_outputs, fig.n_classes
        self.var = tf.Variable(tf.zeros((self.k * figures.BINS,), tf.float64), trainable=False,
                               name="gridml_score_histogram")
        d = fig.disc
        self.signal, self.background = d.signal, list(d.background)
        self.fractions = tf.constant(d.fractions, tf.float64)

    def discriminant(self, p: tf.Tensor) -> tf.Tensor:
        p = tf.cast(p, tf.float64)
        if self.n_outputs <= 1:
            p = tf.clip_by_value(tf.reshape(p, [-1]), 1e-12, 1 - 1e-12)
            return tf.math.log(p) - tf.math.log1p(-p)
        p = tf.clip_by_value(p, 1e-30, 1.0)
        bkg = tf.reduce_sum(tf.gather(p, self.background, axis=-1) * self.fractions, -1)
        return tf.math.log(p[:, self.signal]) - tf.math.log(tf.maximum(bkg, 1e-300))

    def classes(self, y: tf.Tensor) -> tf.Tensor:
        if y.shape.rank == 2 and (y.shape[-1] or 1) > 1:
            return tf.cast(tf.argmax(y, -1), tf.int64)
        y = tf.reshape(y, [-1])
        return tf.cast(y > 0.5, tf.int64) if self.n_outputs <= 1 else tf.cast(y, tf.int64)

    def update(self, y: tf.Tensor, y_pred: tf.Tensor, w: tf.Tensor | None) -> None:
        d = self.discriminant(y_pred)
        idx = tf.clip_by_value(tf.cast(tf.floor((d + figures.D_MAX) * (figures.BINS / (
            2 * figures.D_MAX))), tf.int64), 0, figures.BINS - 1)
        cls = tf.clip_by_value(self.classes(y), 0, self.k - 1)
        ww = tf.ones_like(d) if w is None else tf.cast(tf.reshape(w, [-1]), tf.float64)
        self.var.assign_add(tf.math.unsorted_segment_sum(ww, cls * figures.BINS + idx,
                                                         self.k * figures.BINS))

    def reset(self) -> None:
        self.var.assign(tf.zeros_like(self.var))


def install(model: Any, hist: Histogram) -> None:
    """Wrap ``model.test_step`` (Keras 2's) so validation also fills ``hist``."""
    def test_step(data: Any) -> Any:
        x, y, sw = keras.utils.unpack_x_y_sample_weight(data)
        y_pred = model(x, training=False)
        model.compute_loss(x, y, y_pred, sw)
        hist.update(y, y_pred, sw)
        return model.compute_metrics(x, y, y_pred, sw)

    model.test_step = test_step


class FiguresCallback(keras.callbacks.Callback):
    """Every rank, after Horovod's MetricAverageCallback: the figures of merit into ``logs``."""

    def __init__(self, hist: Histogram, allreduce: Callable[[Any], Any],
                 gather: Callable[[Any], list[Any]], rank: int,
                 val_ds: Callable[[], Any] | None, labels: Callable[[], Any]) -> None:
        super().__init__()
        self.hist, self.allreduce, self.gather, self.rank = hist, allreduce, gather, rank
        self.val_ds, self.labels = val_ds, labels

    def on_test_begin(self, logs: dict | None = None) -> None:
        self.hist.reset()

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        if logs is None or "val_loss" not in logs:
            return
        merged = np.asarray(self.allreduce(self.hist.var)).reshape(self.hist.k, figures.BINS)
        fig = self.hist.fig
        gathered = None
        if fig.hook is not None and self.val_ds is not None:
            scores = self.model.predict(self.val_ds(), verbose=0)
            y, w = self.labels()
            gathered = self.gather((y, scores, w))
        if self.rank == 0:
            got = fig.metrics(merged, gathered)
            if "val_auc" in logs and fig.disc is not None:  # ours: every rank's, weighted
                got["val_auc"] = figures.auc(*figures.sig_bkg(merged, fig.disc))
            logs.update(got)
        else:
            fig.hist = merged


def train_weights(ds: Any, has_weights: bool, class_w: Any, scale: float, n_classes: int) -> Any:
    """``ds`` of (x, y[, w]) batches as (x, y, w x class factor x scale)."""
    cw = tf.constant(np.ones(max(2, n_classes)) if class_w is None else class_w, tf.float32)

    def cls(y: tf.Tensor) -> tf.Tensor:
        if y.shape.rank == 2 and (y.shape[-1] or 1) > 1:
            return tf.argmax(y, -1)
        y = tf.reshape(y, [-1])
        return tf.cast(y > 0.5, tf.int64) if n_classes <= 2 else tf.cast(y, tf.int64)

    def add(x: Any, y: tf.Tensor, w: tf.Tensor | None = None) -> tuple[Any, Any, Any]:
        base = tf.ones([tf.shape(y)[0]], tf.float32) if w is None else tf.cast(w, tf.float32)
        return x, y, base * scale * tf.gather(cw, tf.clip_by_value(cls(y), 0, len(cw) - 1))

    return ds.map(add) if has_weights else ds.map(lambda x, y: add(x, y))
