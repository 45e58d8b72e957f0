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
from collections.abc import Callable

log = logging.getLogger("gridml.payload")


def write_json(path: Path, obj: Any) -> Path:
    """Write JSON atomically (temporary file, fsync, rename); indented for a reader, compact
    above 1 MB (a trial over 10,000 input files: the indenting encoder is pure Python, ~10x
    slower than the C one, seconds at the end of every trial)."""
    tmp = path.with_name(path.name + ".tmp")
    text = json.dumps(obj, sort_keys=True, default=str, separators=(",", ":"))
    if len(text) < 2**20:
        text = json.dumps(obj, indent=2, sort_keys=True, default=str)
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
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
    _ONNX["keras"] = save_onnx_keras(model, out, _random_rows(model))
    return path


_ONNX: dict[str, Any] = {}  # how the last model.onnx export went (provenance runtime.onnx)


def _random_rows(model: Any, n: int = 8) -> list[Any]:
    """Rows for the ONNX check, shaped like the model's inputs (an open axis gets length 5)."""
    import numpy as np

    rng = np.random.default_rng(0)
    return [rng.normal(size=(n, *[5 if d is None else d for d in t.shape[1:]]))
            .astype(t.dtype.as_numpy_dtype) for t in model.inputs]


def verify_onnx(path: Path, inputs: dict[str, Any], expected: Any, *, rtol: float = 1e-3,
                atol: float = 1e-4) -> dict[str, Any]:
    """Run ``path`` with onnxruntime on ``inputs`` (name -> rows) and compare with ``expected``
    (the trained model's outputs on the same rows)."""
    import numpy as np

    try:
        import onnxruntime as ort
    except ImportError:
        return {"verified": False, "reason": "onnxruntime is not installed"}
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    names = [i.name for i in sess.get_inputs()]
    feed = {n: np.asarray(a) for n, a in zip(names, inputs.values())}
    got = np.asarray(sess.run(None, feed)[0], dtype=np.float64)
    want = np.asarray(expected, dtype=np.float64).reshape(got.shape)
    diff = float(np.max(np.abs(got - want))) if got.size else 0.0
    ok = bool(np.allclose(got, want, rtol=rtol, atol=atol))
    if not ok:
        log.warning("model.onnx differs from the trained model by up to %.3g on %d rows", diff,
                    len(got))
    return {"verified": ok, "rows": int(len(got)), "max_abs_diff": diff,
            "onnxruntime": ort.__version__}


def export_onnx(path: Path, write: Callable[[Path], tuple[dict[str, Any], Any]]) -> dict[str, Any]:
    """``model.onnx`` for either framework: ``write(tmp)`` exports the model to ``tmp`` and
    returns the rows to check it on (input name -> rows) and the trained model's outputs on
    them; the file is then renamed into place and checked with onnxruntime. A model that cannot
    be exported leaves no model.onnx and the reason, for provenance: the trial still succeeds."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        inputs, expected = write(tmp)
        os.replace(tmp, path)
    except Exception as e:
        tmp.unlink(missing_ok=True)
        reason = f"{type(e).__name__}: {' '.join(str(e).split())[:300]}"
        log.warning("model.onnx not written: %s", reason)
        return {"written": False, "reason": reason}
    return {"written": True, **verify_onnx(path, inputs, expected)}


def onnx_metadata(path: Path, props: dict[str, str]) -> bool:
    """Add ``props`` to ``path``'s metadata_props (e.g. ``gridml.output``: logit |
    probability), when the file exists and onnx is importable; False otherwise."""
    if not path.is_file():
        return False
    try:
        import onnx
    except ImportError:
        return False
    model = onnx.load(str(path))
    have = {p.key: p for p in model.metadata_props}
    for k, v in props.items():
        if k in have:
            have[k].value = v
        else:
            model.metadata_props.add(key=k, value=v)
    tmp = path.with_name(path.name + ".tmp")
    onnx.save(model, str(tmp))
    os.replace(tmp, path)
    return True


def save_onnx_keras(model: Any, out: Path, sample: list[Any]) -> dict[str, Any]:
    """``model.onnx`` from a Keras model with tf2onnx (batch axis, and any axis the model left
    open, dynamic), checked with onnxruntime on ``sample`` (rows per model input). The trial
    does not fail when tf2onnx is missing or the model cannot be converted: the reason goes
    to provenance."""

    def write(tmp: Path) -> tuple[dict[str, Any], Any]:
        import numpy as np
        import tensorflow as tf
        import tf2onnx

        # its INFO lines (versions, opset, constant folding, optimizer passes) in every trial's
        # log say nothing the provenance does not; a failed conversion still says why
        logging.getLogger("tf2onnx").setLevel(logging.WARNING)
        spec = tuple(tf.TensorSpec((None, *t.shape[1:]), t.dtype, name=t.name.split(":")[0])
                     for t in model.inputs)
        tf2onnx.convert.from_keras(model, input_signature=spec, opset=17, output_path=str(tmp))
        rows = [np.asarray(a) for a in sample]
        expected = model(rows if len(rows) > 1 else rows[0], training=False)
        return ({f"in{i}": a for i, a in enumerate(rows)},
                np.asarray(expected, dtype=np.float32))

    return export_onnx(out / "model.onnx", write)


def plot_curves(reports: list[dict[str, Any]], path: Path, title: str) -> Path | None:
    """Loss and each metric per epoch, train and validation side by side (matplotlib, Agg). The
    model's costs (n_params, model_mb, inference_ms: one number per model, repeated in every
    report) get no panel: three flat lines doubled the figure's width and its drawing time."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log.warning("matplotlib is not installed: no %s", path.name)
        return None
    from payloads.runtime.costs import NAMES as COSTS

    names = sorted({k for r in reports for k in r["metrics"]
                    if not k.startswith("val_") and k not in COSTS})
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
    _margins(fig)
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def _margins(fig: Any, left: float = 0.62, right: float = 0.15, bottom: float = 0.5,
             top: float = 0.62, gap: float = 0.62) -> None:
    """Fixed margins in inches (tick labels, axis labels, titles and the suptitle fit): the same
    layout as ``tight_layout`` for these figures without its extra drawing pass (~0.3 s)."""
    w, h = fig.get_size_inches()
    n = max(1, len(fig.axes))
    panel = (w - left - right - gap * (n - 1)) / n
    fig.subplots_adjust(left=left / w, right=1 - right / w, bottom=bottom / h, top=1 - top / h,
                        wspace=gap / panel)


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
            "runtime": {**(versions if versions is not None else runtime_versions()),
                        **({"onnx": _ONNX["keras"]} if "keras" in _ONNX else {}), **runtime},
            "finished": time.time()}
