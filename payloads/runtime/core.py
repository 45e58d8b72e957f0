"""The framework-neutral half of a trial on this rank, shared by the Keras loop (fit.py with
callbacks.py) and the torch loop (torch_fit.py); each loop keeps only what its framework needs
(the model, the steps, the collectives, how a checkpoint and a model file are written).

- **checkpoints**: which epoch to resume from (:meth:`TrialCore.resume`) and when to save
  (:meth:`TrialCore.checkpoint`, the one place a checkpoint is written from);
- **each epoch** (:meth:`TrialCore.end_epoch`): rank 0 builds the one report
  (payloads/runtime/report.py: metrics already averaged over ranks, the cost metrics, wall
  time, samples/s, input-wait fraction and the profile numbers of every rank), spools and posts
  it and checkpoints; then every rank learns whether the server asked to stop;
- **the end** (:meth:`TrialCore.finish`, rank 0): model files, curves.png, provenance.json and
  result.json; :func:`run_guarded`: a reader thread's error as the cause, and the teardown.

What both loops will gain goes here once: per-epoch metrics beyond the framework's (a metric
hook, figures of merit, event weights) in :meth:`TrialCore.end_epoch`/:func:`build_report`,
extra outputs in :meth:`TrialCore.finish`, a checkpoint on a signal through
:meth:`TrialCore.checkpoint`.

Imports neither TensorFlow nor torch: the frameworks come in as the callables they hand over.
"""

from __future__ import annotations

import logging
import math
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any
from collections.abc import Callable

from payloads.runtime import channel, figures, outputs, profile
from payloads.runtime.errors import PayloadFailure
from payloads.runtime.report import EpochReport
from payloads.runtime.trial import TrialDoc

if TYPE_CHECKING:
    from payloads.runtime.checkpoint import Checkpointer
    from payloads.runtime.reporter import Reporter
    from payloads.runtime.session import Data

log = logging.getLogger("gridml.payload")


def build_report(epoch: int, logs: dict[str, Any], prof: dict[str, Any],
                 extra: dict[str, Any], costs: dict[str, float]) -> EpochReport:
    """Epoch ``epoch`` (1-based) as reported: ``logs`` (the metrics, averaged over ranks) and the
    cost metrics, the merged profile of the ranks (``profile.combine``), ``extra`` beside the
    profile's, and why the epoch was input-bound when it was."""
    more = {**prof.get("extra", {}), **extra}
    reason = profile.input_bound_reason({**prof, "extra": more}, more.get("cache"))
    if reason:
        more["input_bound"] = reason
    return EpochReport(
        epoch=epoch, metrics={**{k: float(v) for k, v in logs.items()}, **costs},
        epoch_time=prof["epoch_time"], samples_per_s=prof.get("samples_per_s"),
        input_wait_frac=prof.get("input_wait_frac"), peak_rss_mb=prof.get("peak_rss_mb"),
        threads=prof.get("threads"), extra=more)


class ValidationFigures:
    """The figures of merit of the validation pass (payloads/runtime/figures.py), both
    frameworks: each rank histograms its scores (:meth:`histograms`); the loop sums the
    histograms over ranks (one all-reduce) and hands them to :meth:`metrics`, with every rank's
    (labels, probabilities, weights) when the model file has a ``metrics`` hook. The last
    epoch's histograms make the artifacts (:meth:`TrialCore.finish`).

    ``output``: what the model returns, ``logit`` (torch, cross-entropy losses) or
    ``probability`` (Keras); ``hook``: the model file's ``metrics(y_true, y_score, weights)``.
    """

    def __init__(self, cfg: TrialDoc, output: str, hook: Callable[..., Any] | None,
                 hook_names: list[str]) -> None:
        self.cfg, self.output, self.hook, self.hook_names = cfg, output, hook, hook_names
        self.names = [m for m in cfg.training.metrics if figures.is_figure(m)]
        self.n_classes = 0
        self.disc: figures.Discriminant | None = None
        self.hist: Any = None

    @property
    def logits(self) -> bool:
        return self.output == "logit"

    def setup(self, n_outputs: int) -> None:
        """The classes from the model's outputs (1 output: two classes)."""
        if self.disc is None:
            self.n_classes = 2 if n_outputs <= 1 else int(n_outputs)
            try:
                self.disc = figures.Discriminant(self.cfg.training.discriminant, self.n_classes)
            except ValueError as e:
                raise PayloadFailure(str(e), code=2) from None

    def histograms(self, scores: Any, y: Any, w: Any) -> Any:
        """(n_classes, BINS) weighted histograms of this rank's raw outputs ``scores``."""
        import numpy as np

        scores = np.asarray(scores)
        self.setup(1 if scores.ndim == 1 else scores.shape[-1])
        assert self.disc is not None
        d = figures.discriminant(scores, self.disc, self.logits)
        return figures.histograms(d, figures.classes(y, scores.shape[-1] if scores.ndim > 1
                                                     else 1), w, self.n_classes)

    def probabilities(self, scores: Any) -> Any:
        """The hook's y_score: the outputs as probabilities."""
        import numpy as np

        s = np.asarray(scores, dtype=np.float64)
        if not self.logits:
            return s
        if s.ndim == 1 or s.shape[-1] == 1:
            return 1 / (1 + np.exp(-s))
        e = np.exp(s - s.max(-1, keepdims=True))
        return e / e.sum(-1, keepdims=True)

    def metrics(self, hist: Any, gathered: list[tuple[Any, Any, Any]] | None) -> dict[str, float]:
        """``val_<name>`` of the requested figures from the merged ``hist``, and of the hook's
        results over ``gathered`` (every rank's (labels, raw outputs, weights); rank 0)."""
        import numpy as np

        self.hist = hist
        assert self.disc is not None or hist is None
        out = ({f"val_{k}": v for k, v in figures.figures(hist, self.disc, self.names).items()}
               if self.disc is not None else {})
        if self.hook is not None and gathered:
            y = np.concatenate([g[0] for g in gathered])
            s = np.concatenate([g[1] for g in gathered])
            w = np.concatenate([g[2] for g in gathered])
            got = self.hook(y, self.probabilities(s), w)
            if not isinstance(got, dict):
                raise PayloadFailure(f"model file {self.cfg.model_file}: metrics(y_true, "
                                     f"y_score, weights) returned {type(got).__name__}, not a "
                                     "dict of name: number", code=2)
            missing = [n for n in self.hook_names if n not in got]
            if missing:
                raise PayloadFailure(f"model file {self.cfg.model_file}: metrics(...) returned "
                                     f"no {missing[0]!r} (training.metrics names it)", code=2)
            out.update({f"val_{k}": float(v) for k, v in got.items()})
        return out

    def write(self, out: Path, title: str, suffix: str = "") -> None:
        """roc.json, roc.png, scores.png from the last epoch's merged histograms (``suffix``
        "_test": roc_test.json, ... of the test split's)."""
        if self.hist is None or self.disc is None:
            return
        levels = sorted({50, 70, 90} | {round(100 * (figures.rejection_level(n) or 0))
                                         for n in self.names if figures.rejection_level(n)})
        figures.write_artifacts(out, self.hist, self.disc, levels, title, self.output,
                                suffix=suffix)


TEST_FIGURES = ("auc", "rejection_at_50", "rejection_at_70", "rejection_at_90")
TEST_FILES = ("roc_test.json", "roc_test.png", "scores_test.png")


def test_figures(cfg: TrialDoc, output: str, hook: Callable[..., Any] | None,
                 hook_names: list[str]) -> ValidationFigures:
    """The figures of the test split (data.test): those of validation, and always ``auc`` and
    the rejections at 50, 70 and 90 %."""
    fig = ValidationFigures(cfg, output, hook, hook_names)
    fig.names += [n for n in TEST_FIGURES if n not in {m.lower() for m in fig.names}]
    return fig


class SplitEvaluation:
    """The one evaluation of the trained model on data.test (both loops, every rank computes,
    rank 0 keeps it in :attr:`TrialCore.test`): ``metrics`` without a prefix (``loss``, the
    framework's metrics, ``auc``, ``rejection_at_NN``, the metrics hook's names), computed by
    the validation code on the test split; ``fig`` its merged histograms. Written by
    :meth:`TrialCore.finish` as roc_test.json, roc_test.png, scores_test.png and result.json's
    ``test``: never an epoch report, so never an objective and never seen by the searcher."""

    def __init__(self, metrics: dict[str, Any], fig: ValidationFigures | None, rows: int) -> None:
        self.metrics = {k.removeprefix("val_"): float(v) for k, v in metrics.items()}
        self.fig, self.rows = fig, rows

    def write(self, out: Path, title: str) -> dict[str, Any]:
        """The test figures' files in ``out``; returns result.json's ``test`` entry."""
        for name in TEST_FILES:
            (out / name).unlink(missing_ok=True)  # an earlier attempt's
        if self.fig is not None:
            self.fig.write(out, f"{title} (test)", suffix="_test")
        log.info("test split (%d rows): %s", self.rows,
                 " ".join(f"{k}={v:.4g}" for k, v in self.metrics.items()))
        return {"metrics": figures.jsonable(self.metrics), "rows": self.rows,
                "files": [n for n in TEST_FILES if (out / n).exists()]}


def metric_hook(cfg: TrialDoc, module: Any, known: tuple[str, ...]) -> tuple[
        Callable[..., Any] | None, list[str], list[str]]:
    """(the model file's ``metrics`` hook, the training.metrics names it gives, the names left
    for the framework): a name that is neither the framework's (``known``) nor a figure of merit
    must come from the hook; without one it is refused in one line."""
    hook = getattr(module, "metrics", None) if module is not None else None
    if hook is not None and not callable(hook):
        raise PayloadFailure(f"model file {cfg.model_file}: metrics is not a function; define "
                             "metrics(y_true, y_score, weights) or remove it", code=2)
    framework, from_hook = [], []
    for m in cfg.training.metrics:
        if m.lower() in known and (m.lower() == "auc" or not figures.is_figure(m)):
            framework.append(m)
        elif not figures.is_figure(m):
            from_hook.append(m)
    if from_hook and hook is None:
        raise PayloadFailure(
            f"training.metrics: '{from_hook[0]}' is not known to the {cfg.training.framework} "
            f"payload; use {', '.join(known)}, rejection_at_NN, or define metrics(y_true, "
            f"y_score, weights) returning it in the model file", code=2)
    return hook, from_hook, framework


def weight_factors(cfg: TrialDoc, labels: Any, weights: Any, n_classes: int) -> Any:
    """Per-class factors (training.class_weights) and the event weights' normalisation: the
    training weights times their class factor, divided by their mean over the training set,
    average 1, so a weighted loss averaged over a batch estimates the weighted mean loss
    (negative weights allowed). Returns (class factors or None, scale)."""
    import numpy as np

    cls = figures.classes(labels, 1 if n_classes <= 2 else n_classes)
    try:
        cw = figures.class_weights(cfg.training.class_weights, cls, weights, n_classes)
    except ValueError as e:
        raise PayloadFailure(str(e), code=2) from None
    w = np.ones(len(cls)) if weights is None else np.asarray(weights, np.float64).reshape(-1)
    eff = w * (cw[np.clip(cls, 0, len(cw) - 1)] if cw is not None else 1.0)
    mean = float(eff.mean()) if len(eff) else 1.0
    if not mean > 0:
        raise PayloadFailure(f"data.weights: the training weights average {mean:g} (times "
                             "their class weights); their sum must be positive", code=3)
    return cw, 1.0 / mean


class TrialCore:
    """One trial's bookkeeping on this rank. Rank 0 holds the reporter and writes; every rank
    resumes and learns whether to stop.

    ``broadcast(obj)``: rank 0's ``obj`` on every rank (the framework's collective);
    ``restore()``: load the newest checkpoint on this rank, returning its epoch (0: none);
    ``save(epoch)``: checkpoint completed epoch ``epoch`` (called on rank 0 only);
    ``costs``: the cost metrics (payloads/runtime/costs.py) put into every epoch's metrics.
    """

    def __init__(self, cfg: TrialDoc, rank: int, reporter: Reporter | None,
                 broadcast: Callable[[Any], Any], *, restore: Callable[[], int] | None = None,
                 save: Callable[[int], Any] | None = None,
                 costs: dict[str, float] | None = None,
                 figures: ValidationFigures | None = None,
                 checkpointer: Checkpointer | None = None) -> None:
        self.cfg, self.rank, self.reporter, self.broadcast = cfg, rank, reporter, broadcast
        # a checkpoint on a signal (payloads/runtime/preempt.py): the mid-epoch position resumed
        # from (batches of the first epoch already trained), what that checkpoint kept beside
        # the model, and why this run left early to be continued (None: it did not)
        self._ckpt = checkpointer
        self.resume_batch = 0
        self.resume_extra: dict[str, Any] = {}
        self.continued: str | None = None
        self._resumed_note: dict[str, Any] | None = None
        self.figures = figures
        self._restore, self._save = restore, save
        self.costs = dict(costs or {})
        self.checkpoints = bool(cfg.training.options.checkpoint)
        self.stop_reason: str | None = None
        self.test: SplitEvaluation | None = None  # rank 0: the evaluation on data.test
        # rank 0's progress.json in the trial's folder (payloads/runtime/channel.py)
        self.progress = channel.Progress(cfg.output_dir.parent) if rank == 0 else None

    # ---- progress (both loops: each epoch's start and each training batch) ----------------
    def begin_epoch(self, epoch: int, batches: int | None) -> None:
        """Epoch ``epoch`` (1-based) of ``batches`` training batches starts."""
        if self.progress is not None:
            self.progress.epoch_start(epoch, batches)

    def batch_done(self) -> None:
        """A training batch finished (rank 0 rewrites progress.json every few seconds)."""
        if self.progress is not None:
            self.progress.batch()
        if self._resumed_note is not None and "signal_to_training_s" not in self._resumed_note:
            sent = self.resume_extra.get("signal_wall")  # the first batch after the resume
            self._resumed_note["signal_to_training_s"] = (
                round(time.time() - float(sent), 3) if sent is not None else None)

    # ---- checkpoints -----------------------------------------------------------------------
    def resume(self) -> int:
        """Restore the newest checkpoint (every rank); returns the number of epochs already done.

        Rank 0 also clears what an earlier attempt left behind: its result.json, and the spooled
        reports of epochs that will run again (all of them when there is no checkpoint)."""
        # a mid-epoch checkpoint (taken on a signal) is resumed from even when the trial keeps
        # no epoch checkpoints: it is what the job left to be continued
        state = self._ckpt.state() if self._ckpt is not None else None
        step = state if state is not None and state.get("kind") == "step" else None
        done = (self._restore() if (self.checkpoints or step is not None)
                and self._restore is not None else 0)
        if step is not None and self._ckpt is not None and done == int(step["epoch"]):
            self.resume_batch = int(step.get("batch", 0))
            self.resume_extra = self._ckpt.extra()
            self._resumed_note = {"epoch": done + 1, "from_batch": self.resume_batch}
            log.info("resuming in epoch %d after its batch %d (mid-epoch checkpoint)", done + 1,
                     self.resume_batch)
        if self.reporter is not None:
            ckpt = self.cfg.output_dir / "checkpoint"
            (self.cfg.output_dir / "result.json").unlink(missing_ok=True)
            self.reporter.spool.truncate_after(done)
            if done:
                log.info("resuming after epoch %d from %s", done, ckpt)
        return done

    def checkpoint(self, epoch: int) -> None:
        """Rank 0: checkpoint completed epoch ``epoch`` when the trial keeps checkpoints."""
        if self.rank == 0 and self.checkpoints and self._save is not None:
            self._save(epoch)  # (replaces a mid-epoch checkpoint of this epoch)
        elif self.rank == 0 and self._ckpt is not None and self.resume_batch:
            self._ckpt.drop_step()  # its epoch is over: a later attempt must not go back to it

    def continue_later(self, epoch: int, batch: int, save: Callable[[], Any]) -> None:
        """Every rank, on the batch all ranks agreed on after a signal: rank 0 writes the
        mid-epoch checkpoint (``save()``: ``epoch`` epochs completed, ``batch`` batches of the
        next one trained), every rank waits until it is on disk (one broadcast), and the run
        ends to be continued (the loop returns errors.CONTINUE_CODE)."""
        if self.rank == 0:
            save()
            if self.reporter is not None:  # posts still queued: a few seconds (spooled anyway)
                self.reporter.close(timeout=10.0)
        self.broadcast(None)  # no rank leaves (its launcher would end the others) before that
        self.continued = f"checkpointed in epoch {epoch + 1} after batch {batch}"
        log.info("%s on a signal: leaving to be continued (exit code 75)", self.continued)

    # ---- each epoch ------------------------------------------------------------------------
    def end_epoch(self, epoch: int, logs: dict[str, Any], prof: dict[str, Any],
                  extra: Callable[[], dict[str, Any]] = dict) -> bool:
        """Every rank after epoch ``epoch`` (1-based): rank 0 reports it (``extra()``: fields
        for the report's extra) and checkpoints; returns False when training is to stop."""
        if self.rank == 0:
            more = extra()
            if self._resumed_note is not None and self._resumed_note["epoch"] == epoch:
                more = {**more, "resumed": self._resumed_note}  # resumed mid-epoch: when, where
            self.report(build_report(epoch, logs, prof, more, self.costs))
            if self.progress is not None:
                self.progress.epoch_end()
        if self.cfg.training.stop_on_nan and epoch < self.cfg.training.epochs:
            bad = sorted(k for k, v in logs.items() if not _finite(v)) if self.rank == 0 else []
            stop, reason = self.broadcast(  # rank 0 decides, every rank stops together
                (bool(bad), f"stop_on_nan: {', '.join(bad)} not finite after epoch {epoch}"))
            if stop:
                self.stop_reason = str(reason)
                log.info("stopping after epoch %d: %s", epoch, self.stop_reason)
                return False
        return not self.should_stop(epoch)

    def report(self, report: EpochReport) -> None:
        """Rank 0: spool and post ``report``, then checkpoint its epoch."""
        body = report.to_json()
        if self.reporter is not None:
            self.reporter.report(body)
        self.checkpoint(report.epoch)
        log.info("epoch %d: %s | %.2fs, %.0f samples/s, input wait %.1f%%", report.epoch,
                 " ".join(f"{k}={v}" if v is None else f"{k}={v:.4g}"
                          for k, v in body["metrics"].items()),
                 report.epoch_time or 0, report.samples_per_s or 0,
                 100 * (report.input_wait_frac or 0))

    def should_stop(self, epoch: int) -> bool:
        """Every rank after epoch ``epoch``: with epochs still to run, rank 0 asks the server
        (with no API: reads the controller's decision.json, channel.py) and every rank gets its
        answer: early stopping's, or `gridml stop`'s."""
        if epoch >= self.cfg.training.epochs:
            return False
        decision = (False, "")
        if self.rank == 0 and self.reporter is not None and self.cfg.early_stopping:
            decision = self.reporter.should_stop() if self.reporter.api is not None \
                else channel.read_decision(self.cfg.output_dir.parent, epoch)  # no API: the folder
        elif self.rank == 0 and self.reporter is not None:
            decision = self._stop_requested(epoch)
        stop, reason = self.broadcast(decision)
        if stop:
            self.stop_reason = reason or "the server asked to stop"
            log.info("stopping after epoch %d: %s", epoch, self.stop_reason)
        return bool(stop)

    def _stop_requested(self, epoch: int) -> tuple[bool, str]:
        """Rank 0, without early stopping: whether `gridml stop` asked this trial to stop (the
        controller's decision.json in the trial's folder, else the API's should-stop once this
        epoch's report is posted); never waits on a slow or gone server (training goes on)."""
        stop, reason = channel.read_decision(self.cfg.output_dir.parent, epoch, 0.0)
        reporter = self.reporter
        if stop or reporter is None or reporter.api is None or not reporter.flush(timeout=0.5):
            return stop, reason
        status, body = reporter.api.request("GET", "/should-stop", retries=0)
        if status == 200 and isinstance(body, dict):
            return bool(body.get("stop")), str(body.get("reason") or "")
        return False, ""

    # ---- the end (rank 0) --------------------------------------------------------------------
    def finish(self, save_model: Callable[[Path], dict[str, Any]],
               runtime: Callable[[], dict[str, Any]],
               versions: dict[str, Any] | None = None) -> None:
        """The outputs: ``save_model(output_dir)`` writes the model files and returns what goes
        into provenance's runtime beside them (e.g. how the ONNX export went); ``runtime()``
        what this run used (called after the model is saved); ``versions``: the framework's
        (None: TensorFlow's and Horovod's)."""
        cfg, out, reporter = self.cfg, self.cfg.output_dir, self.reporter
        assert reporter is not None, "finish() runs on rank 0"
        reporter.close()
        reports = [r for _, r in sorted(reporter.spool.last_by_epoch().items())]
        final = reports[-1]["metrics"] if reports else {}
        epochs_done = reports[-1]["epoch"] if reports else 0
        pruned = self.stop_reason is not None and epochs_done < cfg.training.epochs
        saved = save_model(out)
        title = f"{cfg.study} trial {cfg.trial_number}"
        outputs.plot_curves(reports, out / "curves.png", title)
        kind = self.figures.output if self.figures is not None else None
        if self.figures is not None:
            self.figures.write(out, f"{title} (validation)")
            outputs.onnx_metadata(out / "model.onnx", {"gridml.output": kind or ""})
        test = {"test": self.test.write(out, title)} if self.test is not None else {}
        used = {**runtime(), **saved, "posted_epochs": reporter.posted,
                "unposted_epochs": reporter.failed, "output": kind}
        outputs.write_json(out / "provenance.json",
                           outputs.provenance(cfg, final, used, versions=versions))
        state = "pruned" if pruned else "completed"
        if (self.stop_reason or "").startswith("stop_on_nan:"):
            state = "diverged"  # (training.stop_on_nan) the controller records it so
        outputs.write_json(out / "result.json", {
            "state": state, "objective_metrics": final, "epochs": epochs_done,
            "reason": self.stop_reason, **test})
        log.info("trial finished (%s) after %d epochs: %s", state, epochs_done, out)


def _finite(value: Any) -> bool:
    """False for a NaN or infinite number; anything that is not a number counts as finite."""
    try:
        return math.isfinite(float(value))
    except (TypeError, ValueError):
        return True


def run_guarded(data: Data, body: Callable[[], int], *close: Callable[[], Any]) -> int:
    """``body()`` with the trial's data open: when it fails and a reader thread failed first,
    the reader's error is raised (it is the cause; the training error only its symptom). The
    loaders and files are closed in any case, then each of ``close`` in order."""
    try:
        return body()
    except Exception:
        first = data.first_error()
        if first is not None:
            raise first from None
        raise
    finally:
        for ld in data.loaders:
            ld.close()
        for s in data.sources:
            s.close()
        for fn in close:
            fn()
