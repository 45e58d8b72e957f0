"""The cost metrics a physicist trades accuracy against, measured once when the model is built.

``n_params`` (trainable and not), ``model_mb`` (the model's size on disk: the Keras weights file,
the PyTorch ``state_dict``, in 10^6 bytes) and ``inference_ms`` (latency per event on this
rank's device: the median of :data:`REPEATS` timed forward passes of one fixed batch of
:data:`BATCH` training rows, after a warm-up pass, divided by the batch size). They are constant
per trial, so the reporters put them in every epoch's ``metrics`` (the last-epoch objective rule
then works for them unchanged): ``search.objectives`` and ``search.constraints`` may name them.
A ragged feature (no fixed batch) or a forward pass that fails leaves ``inference_ms`` out (a
warning says why); the others are always there.
"""

from __future__ import annotations

import io
import logging
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

log = logging.getLogger("gridml.payload")

NAMES = ("n_params", "model_mb", "inference_ms")
BATCH = 64  # events in the timed batch
REPEATS = 5  # timed forward passes (the median counts)


def latency_ms(run: Callable[[], Any], events: int, repeats: int = REPEATS) -> float:
    """Milliseconds per event of ``run()`` (one forward pass that waits for its result)."""
    run()  # warm-up: graph tracing, kernel selection, allocations
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        run()
        times.append(time.perf_counter() - t0)
    return 1000.0 * statistics.median(times) / max(events, 1)


def sample(head: dict[str, Any], features: Sequence[str], n: int = BATCH) -> list[np.ndarray] | None:
    """The first ``n`` rows of each feature (float64 as float32), or None when one is ragged."""
    arrays = [head.get(f) for f in features]
    if any(a is None or not isinstance(a, np.ndarray) for a in arrays):
        return None
    out = [np.ascontiguousarray(a[:n]) for a in arrays]  # type: ignore[index]
    return [a.astype(np.float32) if a.dtype == np.float64 else a for a in out]


def _inference(measure: Callable[[], float], why_not: str | None) -> dict[str, float]:
    if why_not:
        log.warning("inference_ms not measured: %s", why_not)
        return {}
    try:
        return {"inference_ms": round(measure(), 6)}
    except Exception as exc:  # a model that cannot run the batch outside fit: say so, go on
        log.warning("inference_ms not measured: the timed forward pass failed: %s", exc)
        return {}


def keras_costs(model: Any, rows: list[np.ndarray] | None) -> dict[str, float]:
    """The cost metrics of a built Keras model; ``rows``: :func:`sample`'s batch."""
    with tempfile.TemporaryDirectory() as tmp:  # the weights: a compiled Horovod optimizer
        path = Path(tmp) / "model.weights.h5"  # need not serialise
        model.save_weights(path)
        mb = path.stat().st_size / 1e6
    out = {"n_params": float(model.count_params()), "model_mb": round(mb, 6)}

    def measure() -> float:
        x = rows[0] if len(rows) == 1 else rows  # type: ignore[arg-type,index]
        return latency_ms(lambda: np.asarray(model(x, training=False)), len(rows[0]))  # type: ignore[index]

    return out | _inference(measure, None if rows else "a ragged feature has no fixed batch")


def torch_costs(model: Any, rows: list[np.ndarray] | None, device: Any) -> dict[str, float]:
    """The cost metrics of a built PyTorch model (on ``device``); ``rows``: :func:`sample`'s."""
    import torch

    buf = io.BytesIO()
    torch.save(model.state_dict(), buf)
    out = {"n_params": float(sum(p.numel() for p in model.parameters())),
           "model_mb": round(buf.tell() / 1e6, 6)}

    def measure() -> float:
        x = [torch.as_tensor(a).to(device) for a in rows]  # type: ignore[union-attr]

        def run() -> None:
            with torch.no_grad():
                model(*x)
            if device.type == "cuda":
                torch.cuda.synchronize(device)

        was = model.training
        model.eval()
        try:
            return latency_ms(run, len(rows[0]))  # type: ignore[index]
        finally:
            model.train(was)

    return out | _inference(measure, None if rows else "a ragged feature has no fixed batch")
