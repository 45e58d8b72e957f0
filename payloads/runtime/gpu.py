"""One GPU per rank (by Horovod's local rank), memory growth on, CPU when there is none."""

from __future__ import annotations

from typing import Any


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


def precision_policy(option: Any, device: str) -> str:
    """Keras dtype policy for ``training.mixed_precision`` on ``device``.

    ``true``/``"mixed_float16"`` uses float16 on a GPU and stays float32 on a CPU (float16
    matmuls are emulated there, slower); ``"mixed_bfloat16"`` is honoured everywhere.
    """
    if option in (None, False, "float32", "none"):
        return "float32"
    if option == "mixed_bfloat16":
        return "mixed_bfloat16"
    return "mixed_float16" if device.startswith("GPU") else "float32"
