"""Study-level plots (matplotlib, Agg): convergence (best objective vs trial)."""

from __future__ import annotations

from pathlib import Path

from gridml.store import Trial


def convergence_plot(trials: list[Trial], objective: str, direction: str, path: Path) -> Path | None:
    """Objective of each finished trial and the running best, in trial order."""
    done = sorted((t for t in trials if t.objective is not None and t.state in ("completed", "pruned")),
                  key=lambda t: t.number)
    if not done:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pick = max if direction == "maximize" else min
    xs = [t.number for t in done]
    ys = [float(t.objective) for t in done]  # type: ignore[arg-type]
    best = [pick(ys[: i + 1]) for i in range(len(ys))]
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.scatter(xs, ys, s=18, label="trial", color="tab:blue")
    ax.step(xs, best, where="post", color="tab:red", label="best so far")
    ax.set(xlabel="trial number", ylabel=objective, title=f"convergence ({direction})")
    ax.legend()
    # fixed margins (inches over the 6 x 4 figure) for the tick and axis labels and the title:
    # tight_layout's layout without its extra drawing pass
    fig.subplots_adjust(left=0.85 / 6, right=1 - 0.15 / 6, bottom=0.55 / 4, top=1 - 0.4 / 4)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
