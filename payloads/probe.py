"""The build check of ``gridml validate`` / ``gridml submit``: ``python -m payloads.probe trial.json``.

Run on the submit host, in the payload's environment (``payload.python``), before anything is
submitted. It builds the trial's model exactly as a trial would, through the payload's own code
(the model file imported by :mod:`payloads.runtime.userfile`, the data layout and loaders of
:mod:`payloads.runtime.session`, ``build_model`` and compile of :mod:`payloads.runtime.model` /
:mod:`payloads.runtime.torch_model`, the metric names of :func:`payloads.runtime.core.metric_hook`),
on one batch of the first training file, runs it forward once, computes the loss, the metrics and
the figures of merit (and the model file's ``metrics`` hook) on that batch. Nothing is trained or
written.

Prints one JSON line on stdout, the last: ``{"ok": "<what ran>"}``, ``{"problem": "<one line>",
"field": "payload.model"}`` (exit 2), or ``{"skipped": "<why>"}`` when the framework is not
importable here (exit 0). stdlib + numpy + h5py + the framework, never gridml.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import sys
import traceback
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from payloads.runtime import threads
from payloads.runtime.errors import PayloadFailure
from payloads.runtime.trial import TrialDoc, load_trial

PROBE_BATCH = 32  # rows of the one batch (the spec's batch_size when smaller)
ADAPT_ROWS = 2000  # rows a Normalization layer (Keras) or model.adapt (torch) is adapted on


class Problem(Exception):
    """A problem found by the check: ``field`` names the spec field to fix."""

    def __init__(self, message: str, field: str = "payload.model") -> None:
        super().__init__(" ".join(message.split()))
        self.field = field


def _model_line(exc: BaseException, model_file: Path) -> str:
    """`` (line 12)``: the deepest frame of ``exc``'s traceback in the model file; '' if none."""
    where = ""
    for frame in traceback.extract_tb(exc.__traceback__):
        if Path(frame.filename).resolve() == model_file.resolve():
            where = f" (line {frame.lineno})"
    return where


def _why(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text[:300]}" if text else type(exc).__name__


def _shapes(loader: Any) -> str:
    """The model's inputs as the trial gives them: ``jets (B, 10), tracks (B, 16, 4)``."""
    parts = []
    for f in loader.features:
        dims = ", ".join("L" if d is None else str(d) for d in loader.row_shape(f))
        parts.append(f"{f} (B{', ' if dims else ''}{dims})")
    return ", ".join(parts)


def _field_of(message: str) -> str:
    """The spec field a payload failure names first (``training.metrics: ...``)."""
    head = message.split(":", 1)[0].split(" ", 1)[0].strip("'")
    if head.startswith(("training.", "data.")):
        return head
    return "payload.model"


def _small(cfg: TrialDoc) -> TrialDoc:
    """The trial with one small batch, the first training file only and little adapting."""
    import h5py

    t = cfg.training
    with h5py.File(cfg.data.train[0], "r") as f:  # (a tiny file: one batch of what it has)
        rows = len(f[cfg.data.labels]) if cfg.data.labels in f else PROBE_BATCH
    opts = dataclasses.replace(t.options, adapt_samples=min(t.options.adapt_samples, ADAPT_ROWS),
                               reader_processes=0, cache_budget_mb=64.0)
    training = dataclasses.replace(t, batch_size=max(1, min(t.batch_size, PROBE_BATCH, rows)),
                                   workers=1, options=opts)
    data = dataclasses.replace(cfg.data, train=cfg.data.train[:1], validation=(), test=())
    return cfg.replace(training=training, data=data)


def _one_batch(loader: Any) -> dict[str, Any]:
    gen = loader.epoch_batches(0)
    try:
        return next(gen)
    finally:
        gen.close()


def _figures(cfg: TrialDoc, output: str, hook: Any, hook_names: list[str], scores: Any,
             y: Any, w: Any) -> None:
    """The figures of merit and the metrics hook on the batch, as the validation pass runs them."""
    import numpy as np

    from payloads.runtime.core import ValidationFigures

    fig = ValidationFigures(cfg, output, hook, hook_names)
    s, yy = np.asarray(scores, dtype=np.float32), np.asarray(y)
    ww = np.ones(len(yy)) if w is None else np.asarray(w, np.float64).reshape(-1)
    hist = fig.histograms(s, yy, ww)
    fig.metrics(hist, [(yy, s, ww)] if hook is not None else None)


# ---- torch ---------------------------------------------------------------------------------------
def check_torch(cfg: TrialDoc) -> str:
    import torch

    from payloads.runtime import torch_model
    from payloads.runtime.core import metric_hook, run_guarded
    from payloads.runtime.session import _input_shape, open_data
    from payloads.runtime.torch_fit import batches, forward

    path = cfg.model_file
    user = torch_model.load(path)
    hook, hook_names, names = metric_hook(cfg, user.module, torch_model.METRICS)
    metrics = torch_model.Metrics(names, cfg.training.loss, torch.device("cpu"))
    loss_fn = user.loss or torch_model.loss_fn(cfg.training.loss)
    event_loss = user.loss or torch_model.event_loss_fn(cfg.training.loss)
    data = open_data(cfg, 0, 1)

    def body() -> int:
        loader = data.train
        shape = _input_shape(loader, list(loader.features))
        inputs = _shapes(loader)
        torch.manual_seed(cfg.seed % 2**31)
        try:
            model = torch_model.build(user, path, cfg.hparams, shape)
        except PayloadFailure:
            raise
        except Exception as e:
            raise Problem(f"model file {path}{_model_line(e, path)}: build_model(hparams, "
                          f"input_shape={shape!r}) failed: {_why(e)}; fix build_model for the "
                          f"data's inputs {inputs}") from None
        adapt = getattr(model, "adapt", None)
        if callable(adapt):
            head = loader.src.head(cfg.training.options.adapt_samples)
            adapt([head.get(f) for f in loader.features])
        gen = batches(loader, [0], torch.device("cpu"))
        try:
            x, y, w = next(gen)
        finally:
            gen.close()
        model.train()
        out = None
        try:
            if user.training_step is not None:
                batch = (x[0] if len(x) == 1 else x, y) + ((w,) if w is not None else ())
                r = user.training_step(model, batch, loss_fn)
                loss, out = r if isinstance(r, tuple) else (r, None)
            else:
                out = forward(model, x)
        except Exception as e:
            raise Problem(f"model file {path}{_model_line(e, path)}: the model's forward on "
                          f"one batch of {inputs} failed: {_why(e)}; make the model take the "
                          "data's inputs (docs/payload.md)") from None
        if out is not None and user.training_step is None:
            try:
                loss = (torch_model.weighted(event_loss(out, y), w.float(), "the loss")
                        if w is not None else loss_fn(out, y))
            except PayloadFailure:
                raise
            except Exception as e:
                where = ("model file's loss hook" if user.loss else
                         f"training.loss {cfg.training.loss!r}")
                raise Problem(f"the {where} on the model's output {tuple(out.shape)} and the "
                              f"labels {tuple(y.shape)} failed: {_why(e)}; make the model's "
                              "output fit the labels (or the loss)",
                              "payload.model" if user.loss else "training.loss") from None
        loss.backward()
        metrics.update(loss.detach(), out, y, w)
        metrics.reduce(None)
        if out is not None and (metrics.logits or hook is not None):
            _figures(cfg, "logit" if metrics.logits else "probability", hook, hook_names,
                     out.detach().float().numpy(), y.numpy(), None if w is None else w.numpy())
        return 0

    run_guarded(data, body)
    return f"torch model built and run on one batch of {_shapes_of(cfg)}"


# ---- keras ---------------------------------------------------------------------------------------
class OneRank(SimpleNamespace):
    """What :func:`payloads.runtime.session.build_model` asks of Horovod, for one rank."""

    def __init__(self) -> None:
        super().__init__(Compression=SimpleNamespace(fp16=None, none=None))

    @staticmethod
    def size() -> int:
        return 1

    @staticmethod
    def DistributedOptimizer(opt: Any, compression: Any = None) -> Any:  # Horovod's name
        return opt


def check_keras(cfg: TrialDoc) -> str:
    import tensorflow as tf

    from payloads.runtime import session
    from payloads.runtime.core import run_guarded
    from payloads.runtime.fit import keras_metric_names
    from payloads.runtime.session import open_data

    path = cfg.model_file
    hook, hook_names, keras_names = keras_metric_names(cfg)  # imports the model file
    tf.keras.utils.set_random_seed(cfg.seed % 2**31)
    data = open_data(cfg, 0, 1)

    def body() -> int:
        loader = data.train
        inputs = _shapes(loader)
        try:
            model = session.build_model(cfg, data, OneRank(), keras_names)
        except PayloadFailure:
            raise
        except Exception as e:
            raise Problem(f"model file {path}{_model_line(e, path)}: building and compiling "
                          f"the model for inputs {inputs} failed: {_why(e)}; fix build_model "
                          "(or training.loss / training.metrics)") from None
        x, y, *w = loader.xy(_one_batch(loader))
        try:
            model.test_on_batch(x, y, sample_weight=w[0] if w else None)
            scores = model.predict_on_batch(x)
        except Exception as e:
            raise Problem(f"model file {path}{_model_line(e, path)}: the model on one batch "
                          f"of {inputs} (labels {tuple(y.shape)}) failed: {_why(e)}; make the "
                          "model take the data's inputs and give outputs that fit the labels "
                          "and training.loss") from None
        classifier = "crossentropy" in str(cfg.training.loss).lower()
        if classifier or hook is not None:
            _figures(cfg, "probability", hook, hook_names, scores, y, w[0] if w else None)
        return 0

    run_guarded(data, body)
    return f"keras model built and run on one batch of {_shapes_of(cfg)}"


def _shapes_of(cfg: TrialDoc) -> str:
    from payloads.runtime.session import layout

    return f"{cfg.training.batch_size} rows ({', '.join(layout(cfg).features)})"


# ---- entry ---------------------------------------------------------------------------------------
def probe(cfg: TrialDoc) -> dict[str, Any]:
    """The check's verdict for ``cfg`` (see the module docstring), in this process."""
    module = "torch" if cfg.training.framework == "torch" else "tensorflow"
    if importlib.util.find_spec(module) is None:
        return {"skipped": f"{module} is not importable by {sys.executable} (the payload's "
                           "interpreter here)"}
    try:
        cfg = _small(cfg)
        ok = check_torch(cfg) if module == "torch" else check_keras(cfg)
    except Problem as e:
        return {"problem": str(e), "field": e.field}
    except PayloadFailure as e:
        field = "data.train" if e.code == 3 else _field_of(str(e))
        return {"problem": str(e), "field": field, "code": e.code}
    except Exception as e:  # not foreseen above: the model file's fault only where it raised
        where = _model_line(e, cfg.model_file)
        if where:
            return {"problem": f"model file {cfg.model_file}{where}: {_why(e)}",
                    "field": "payload.model"}
        return {"skipped": f"the check itself failed: {_why(e)}"}
    return {"ok": ok}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python -m payloads.probe TRIAL.json", file=sys.stderr)
        return 64
    threads.apply_env(threads.plan_threads(1, 1))  # one small batch: no thread pools
    try:
        cfg = load_trial(argv[0])
        verdict = probe(cfg)
    except PayloadFailure as e:
        verdict = {"problem": str(e), "field": _field_of(str(e)), "code": e.code}
    sys.stdout.flush()
    print(json.dumps(verdict), flush=True)
    return 2 if "problem" in verdict else 0


if __name__ == "__main__":
    raise SystemExit(main())
