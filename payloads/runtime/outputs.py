"""What rank 0 leaves in the output directory: model, curves.png, provenance.json, result.json."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import platform
import socket
import sys
import time
from pathlib import Path
from typing import Any

log = logging.getLogger("gridml.payload")


def write_json(path: Path, obj: Any) -> Path:
    """Write JSON atomically (temporary file, fsync, rename)."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=2, sort_keys=True, default=str)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    return path


def save_model(model: Any, out: Path, loss: Any, metrics: list[Any]) -> Path:
    """Save as ``model.keras``, compiled with a plain optimizer so it loads without Horovod."""
    from tensorflow import keras

    opt = keras.optimizers.Adam()
    opt.build(model.trainable_variables)  # saved with its slots, so loading warns about nothing
    model.compile(optimizer=opt, loss=loss, metrics=metrics)
    path = out / "model.keras"
    tmp = out / "model.tmp.keras"
    model.save(tmp)
    os.replace(tmp, path)
    return path


def plot_curves(reports: list[dict[str, Any]], path: Path, title: str) -> Path | None:
    """Loss and each metric per epoch, train and validation side by side (matplotlib, Agg)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log.warning("matplotlib is not installed: no %s", path.name)
        return None
    names = sorted({k for r in reports for k in r["metrics"] if not k.startswith("val_")})
    fig, axes = plt.subplots(1, max(1, len(names)), figsize=(4.2 * max(1, len(names)), 3.4))
    axes = axes if hasattr(axes, "__len__") else [axes]
    epochs = [r["epoch"] for r in reports]
    for ax, name in zip(axes, names):
        for key, style in ((name, "o-"), (f"val_{name}", "s--")):
            ys = [r["metrics"].get(key) for r in reports]
            if any(y is not None for y in ys):
                ys = [float("nan") if y is None else y for y in ys]
                ax.plot(epochs, ys, style, label=key)
        ax.set_xlabel("epoch")
        ax.set_title(name)
        ax.legend()
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def runtime_versions() -> dict[str, Any]:
    import h5py
    import numpy as np
    import tensorflow as tf

    try:
        import horovod

        hvd_version = horovod.__version__
    except ImportError:
        hvd_version = None
    return {"python": sys.version.split()[0], "tensorflow": tf.__version__,
            "horovod": hvd_version, "numpy": np.__version__, "h5py": h5py.__version__,
            "host": socket.gethostname(), "platform": platform.platform()}


def copy_model_source(cfg: Any, out: Path) -> dict[str, Any]:
    """A copy of the user's model file beside the trained model (``model_source.py``), and its
    sha256: a trained model can be traced to the code that built it."""
    source = Path(cfg.model_file).read_bytes()
    dest = out / "model_source.py"
    tmp = out / "model_source.py.tmp"
    tmp.write_bytes(source)
    os.replace(tmp, dest)
    return {"path": str(cfg.model_file), "name": Path(cfg.model_file).name,
            "sha256": hashlib.sha256(source).hexdigest(), "copy": dest.name}


def provenance(cfg: Any, final_metrics: dict[str, float], runtime: dict[str, Any],
               versions: dict[str, Any] | None = None) -> dict:
    """The trial file's provenance plus what this run actually used (``versions``: the
    framework's, default TensorFlow's and Horovod's)."""
    doc = cfg.to_json()
    model = copy_model_source(cfg, cfg.output_dir)
    return {**cfg.provenance, "study": cfg.study, "trial_id": cfg.trial_id,
            "trial_number": cfg.trial_number, "hparams": cfg.hparams, "seed": cfg.seed,
            "framework": cfg.training.framework, "training": doc["training"], "data": doc["data"],
            "inputs": cfg.provenance.get("inputs") or list(cfg.inputs),
            "model_file": str(cfg.model_file), "model": model, "final_metrics": final_metrics,
            "runtime": {**(versions if versions is not None else runtime_versions()), **runtime},
            "finished": time.time()}
