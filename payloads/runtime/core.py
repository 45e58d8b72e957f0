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
from pathlib import Path
from typing import TYPE_CHECKING, Any
from collections.abc import Callable

from payloads.runtime import outputs, profile
from payloads.runtime.report import EpochReport
from payloads.runtime.trial import TrialDoc

if TYPE_CHECKING:
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
                 costs: dict[str, float] | None = None) -> None:
        self.cfg, self.rank, self.reporter, self.broadcast = cfg, rank, reporter, broadcast
        self._restore, self._save = restore, save
        self.costs = dict(costs or {})
        self.checkpoints = bool(cfg.training.options.checkpoint)
        self.stop_reason: str | None = None

    # ---- checkpoints -----------------------------------------------------------------------
    def resume(self) -> int:
        """Restore the newest checkpoint (every rank); returns the number of epochs already done.

        Rank 0 also clears what an earlier attempt left behind: its result.json, and the spooled
        reports of epochs that will run again (all of them when there is no checkpoint)."""
        done = self._restore() if self.checkpoints and self._restore is not None else 0
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
            self._save(epoch)

    # ---- each epoch ------------------------------------------------------------------------
    def end_epoch(self, epoch: int, logs: dict[str, Any], prof: dict[str, Any],
                  extra: Callable[[], dict[str, Any]] = dict) -> bool:
        """Every rank after epoch ``epoch`` (1-based): rank 0 reports it (``extra()``: fields
        for the report's extra) and checkpoints; returns False when training is to stop."""
        if self.rank == 0:
            self.report(build_report(epoch, logs, prof, extra(), self.costs))
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
        """Every rank after epoch ``epoch``: with early stopping and epochs still to run, rank 0
        asks the server and every rank gets its answer."""
        if not (self.cfg.early_stopping and epoch < self.cfg.training.epochs):
            return False
        decision = (False, "")
        if self.rank == 0 and self.reporter is not None:
            decision = self.reporter.should_stop()
        stop, reason = self.broadcast(decision)
        if stop:
            self.stop_reason = reason or "the server asked to stop"
            log.info("stopping after epoch %d: %s", epoch, self.stop_reason)
        return bool(stop)

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
        outputs.plot_curves(reports, out / "curves.png", f"{cfg.study} trial {cfg.trial_number}")
        used = {**runtime(), **saved, "posted_epochs": reporter.posted,
                "unposted_epochs": reporter.failed}
        outputs.write_json(out / "provenance.json",
                           outputs.provenance(cfg, final, used, versions=versions))
        state = "pruned" if pruned else "completed"
        outputs.write_json(out / "result.json", {
            "state": state, "objective_metrics": final, "epochs": epochs_done,
            "reason": self.stop_reason})
        log.info("trial finished (%s) after %d epochs: %s", state, epochs_done, out)


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
