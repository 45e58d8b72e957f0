"""One GPU per rank (by Horovod's local rank), memory growth on, CPU when there is none."""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger("gridml.payload")


def choose_gpu(local_rank: int, n_gpus: int) -> int | None:
    """Index of the GPU this rank uses among the visible ones, or None for CPU."""
    if n_gpus <= 0:
        return None
    return local_rank % n_gpus


def setup_gpu(tf_config: Any, local_rank: int, wanted: int) -> str:
    """Make one GPU visible to this rank with memory growth; returns 'GPU:<i>' or 'CPU'.

    ``tf_config`` is ``tf.config`` (passed in so the choice is testable without TensorFlow);
    ``wanted`` is the trial's ``resources.gpus`` (0: stay on CPU even if GPUs exist).
    """
    gpus = tf_config.list_physical_devices("GPU") if wanted > 0 else []
    index = choose_gpu(local_rank, len(gpus))
    if index is None:
        if wanted <= 0 and hasattr(tf_config, "set_visible_devices"):
            tf_config.set_visible_devices([], "GPU")
        return "CPU"
    gpu = gpus[index]
    tf_config.experimental.set_memory_growth(gpu, True)
    tf_config.set_visible_devices([gpu], "GPU")
    return f"GPU:{index}"


def precision_kind(option: Any) -> str:
    """``training.mixed_precision`` as ``float32``, ``fp16`` or ``bf16``: false/none/float32;
    true, fp16, mixed_float16; bf16, bfloat16, mixed_bfloat16. Anything else: ValueError."""
    if option in (None, False, "float32", "none"):
        return "float32"
    if option is True:
        return "fp16"
    name = str(option).strip().lower()
    if name in ("fp16", "float16", "mixed_float16"):
        return "fp16"
    if name in ("bf16", "bfloat16", "mixed_bfloat16"):
        return "bf16"
    raise ValueError(f"training.mixed_precision: {option!r} is not false, true, bf16 or fp16")


def effective_precision(option: Any, on_gpu: bool) -> str:
    """The kind this rank trains in: fp16 needs a GPU (float16 matmuls are emulated on a CPU,
    slower than float32), so on a CPU it falls back to float32 with a log line; bf16 is
    honoured everywhere."""
    kind = precision_kind(option)
    if kind == "fp16" and not on_gpu:
        log.info("mixed_precision %s: float16 needs a GPU; training in float32 on the CPU",
                 option)
        return "float32"
    return kind


def precision_policy(option: Any, device: str) -> str:
    """Keras dtype policy for ``training.mixed_precision`` on ``device`` (``GPU:<i>``/``CPU``):
    ``mixed_float16`` for true/fp16 on a GPU (float32 on a CPU), ``mixed_bfloat16`` for bf16."""
    kind = effective_precision(option, device.startswith("GPU"))
    return {"float32": "float32", "fp16": "mixed_float16", "bf16": "mixed_bfloat16"}[kind]
