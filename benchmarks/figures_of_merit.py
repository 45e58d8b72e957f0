"""Figures-of-merit benchmark (issue 20): what ``val_rejection_at_NN``/``val_auc`` and the metric
hook cost per epoch, and how the histogram rejection compares with scikit-learn's exact one.

    .venv/bin/python benchmarks/figures_of_merit.py [--events 200000] [--batch 1024] [--repeat 3]

1. **Cost per epoch.** The torch validation pass as the payload runs it
   (payloads/runtime/torch_fit.py: forward, the weighted loss and metrics accuracy + auc through
   ``torch_model.Metrics``, the reduce), on ``--events`` validation events of 20 features through
   a 3-layer MLP, without and with the figures of merit (each batch's outputs kept, the
   per-class weighted histograms of the discriminant, their merge, ``rejection_at_50``,
   ``rejection_at_90`` and ``auc``), and with a metric hook as well; then the figures' own work
   alone on the same outputs (what the goal is judged on: the difference of two whole passes
   drowns in a loaded machine's noise). Goal: the figures add < 5 % to the validation pass. The artifacts (roc.json, roc.png, scores.png) are written once per
   trial; their time is printed apart.
2. **Accuracy.** ``rejection_at_NN`` from the histograms vs scikit-learn's ``roc_curve`` on the
   same weighted scores (linear interpolation of its exact curve), for NN = 30, 50, 70, 90 and
   10^4, 10^5, 10^6 events (10 % negative weights): both values, their ratio and the documented
   binning-error bound (``figures.rejection_error``: the difference must lie within it).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from payloads.runtime import figures


def _data(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    y = (rng.random(n) < 0.5).astype(np.float32)
    x = rng.normal(size=(n, 20)).astype(np.float32) + 0.4 * y[:, None]
    w = rng.uniform(0.5, 1.5, n).astype(np.float32)
    w[rng.random(n) < 0.1] *= -0.3
    return x, y, w


def validation_pass(model, x, y, w, batch: int, with_figures: bool, hook: bool) -> float:
    """CPU seconds of one validation pass as torch_fit.Trainer.validate runs it (CPU time:
    what a shared machine's load inflates least; one torch thread)."""
    import torch

    from payloads.runtime import torch_model
    from payloads.runtime.core import ValidationFigures
    from payloads.runtime.trial import Data, TrialDoc, Training

    cfg = TrialDoc(study="b", trial_id=1, trial_number=0, hparams={}, model_file=Path("m.py"),
                   training=Training(framework="torch",
                                     metrics=("accuracy", "auc", "rejection_at_50",
                                              "rejection_at_90")),
                   data=Data(), output_dir=Path("."))

    def metric_hook(y_true, y_score, weights):
        return {"mean_score": float(np.average(y_score.reshape(-1), weights=np.abs(weights)))}

    fig = ValidationFigures(cfg, "logit", metric_hook if hook else None, [])
    device = torch.device("cpu")
    event_loss = torch_model.event_loss_fn("binary_crossentropy")
    t0 = time.process_time()
    with torch.no_grad():
        m = torch_model.Metrics(["accuracy", "auc"], "binary_crossentropy", device)
        keep = []
        for lo in range(0, len(x), batch):
            xb, yb, wb = (torch.from_numpy(a[lo:lo + batch]) for a in (x, y, w))
            out = model(xb)
            loss = torch_model.weighted(event_loss(out, yb), wb, "loss") / wb.float().mean()
            m.update(loss, out, yb, wb)
            if with_figures:
                keep.append((out.float().cpu(), yb.clone(), wb.clone()))
        logs = m.reduce(None)
        if with_figures:
            s = torch.cat([k[0] for k in keep]).numpy()
            yy = torch.cat([k[1] for k in keep]).numpy()
            ww = torch.cat([k[2] for k in keep]).numpy()
            hist = torch.from_numpy(fig.histograms(s, yy, ww))  # the all-reduce would go here
            logs.update(fig.metrics(hist.numpy(), [(yy, s, ww)] if hook else None))
    return time.process_time() - t0


def _figure_work(outs: list, y: np.ndarray, w: np.ndarray, batch: int) -> float:
    """CPU seconds of what the figures add to a pass whose outputs are ``outs``."""
    import torch

    from payloads.runtime.core import ValidationFigures
    from payloads.runtime.trial import Data, TrialDoc, Training

    cfg = TrialDoc(study="b", trial_id=1, trial_number=0, hparams={}, model_file=Path("m.py"),
                   training=Training(framework="torch", metrics=("auc", "rejection_at_50",
                                                                 "rejection_at_90")),
                   data=Data(), output_dir=Path("."))
    fig = ValidationFigures(cfg, "logit", None, [])
    t0 = time.process_time()
    keep = []
    for i, out in enumerate(outs):
        lo = i * batch
        keep.append((out.float().clone(), torch.from_numpy(y[lo:lo + batch]).clone(),
                     torch.from_numpy(w[lo:lo + batch]).clone()))
    s = torch.cat([k[0] for k in keep]).numpy()
    yy = torch.cat([k[1] for k in keep]).numpy()
    ww = torch.cat([k[2] for k in keep]).numpy()
    fig.metrics(fig.histograms(s, yy, ww), None)
    return time.process_time() - t0


def cost(events: int, batch: int, repeat: int) -> None:
    import torch

    torch.manual_seed(0)
    torch.set_num_threads(1)
    x, y, w = _data(events)
    model = torch.nn.Sequential(torch.nn.Linear(20, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64),
                                torch.nn.ReLU(), torch.nn.Linear(64, 1)).eval()
    kinds = (("validation pass", False, False), ("+ figures of merit", True, False),
             ("+ figures + metric hook", True, True))
    for _, f, h in kinds:  # warm up
        validation_pass(model, x[:batch * 4], y[:batch * 4], w[:batch * 4], batch, f, h)
    times: dict[str, list[float]] = {name: [] for name, _, _ in kinds}
    for _ in range(repeat):  # interleaved, so a shared machine's load hits all alike
        for name, f, h in kinds:
            times[name].append(validation_pass(model, x, y, w, batch, f, h))
    rows = {name: min(t) for name, t in times.items()}
    # the figures' own work alone (the copies kept per batch, the histograms, the figures),
    # on the same outputs: less exposed to the load than the difference of two passes
    with torch.no_grad():
        outs = [model(torch.from_numpy(x[lo:lo + batch])) for lo in range(0, len(x), batch)]
    work = min(_figure_work(outs, y, w, batch) for _ in range(repeat))
    base = rows["validation pass"]
    print(f"\n1. cost per epoch: {events} validation events, batch {batch}, best of {repeat} "
          "(CPU, 1 thread)")
    print(f"   {'':28s} {'CPU s':>9s} {'vs plain':>9s}")
    for name, t in rows.items():
        print(f"   {name:28s} {t:9.4f} {100 * (t / base - 1):+8.2f}%")
    extra = work / base
    print(f"   the figures' own work alone: {work:.4f} CPU s = {100 * extra:.2f}% of the "
          f"validation pass (goal < 5 %: {'met' if extra < 0.05 else 'NOT met'})")
    d = x @ np.ones(20, np.float32) * 0.2
    hist = figures.histograms(d, (y > 0.5).astype(int), w, 2)
    for when in ("first (imports matplotlib)", "again"):
        with tempfile.TemporaryDirectory() as tmp:
            t0 = time.perf_counter()
            figures.write_artifacts(Path(tmp), hist, figures.Discriminant(None, 2), [50, 90],
                                    "bench", "logit")
            print(f"   artifacts once per trial (roc.json, roc.png, scores.png), {when}: "
                  f"{time.perf_counter() - t0:.3f} s")


def accuracy() -> None:
    from sklearn.metrics import roc_curve

    print("\n2. rejection_at_NN: histograms (8000 bins in log-odds) vs sklearn roc_curve, "
          "same weighted scores")
    print(f"   {'events':>8s} {'NN':>3s} {'gridml':>10s} {'sklearn':>10s} {'ratio':>8s} "
          f"{'|d eps_b|':>10s} {'bound':>10s} {'within':>6s}")
    disc = figures.Discriminant(None, 2)
    for n in (10_000, 100_000, 1_000_000):
        rng = np.random.default_rng(n)
        y = (rng.random(n) < 0.4).astype(int)
        d = rng.normal(np.where(y == 1, 1.5, -1.0), 1.2)
        w = rng.uniform(0.5, 2.0, n)
        w[rng.random(n) < 0.1] *= -0.3
        fpr, tpr, _ = roc_curve(y, d, sample_weight=w)
        hist = figures.histograms(d, y, w, 2)
        sig, bkg = figures.sig_bkg(hist, disc)
        for nn in (30, 50, 70, 90):
            got = figures.rejection(sig, bkg, nn / 100)
            eb = float(np.interp(nn / 100, tpr, fpr))
            bound = figures.rejection_error(sig, bkg, nn / 100)
            diff = abs(1 / got - eb)
            print(f"   {n:8d} {nn:3d} {got:10.4f} {1 / eb:10.4f} {got * eb:8.5f} {diff:10.2e} "
                  f"{bound:10.2e} {'yes' if diff <= bound + 1e-12 else 'NO':>6s}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=200_000)
    ap.add_argument("--batch", type=int, default=1024)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args(argv)
    cost(a.events, a.batch, a.repeat)
    accuracy()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
