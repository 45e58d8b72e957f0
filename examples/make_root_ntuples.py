"""Write small ROOT ntuples of jets for `gridml prepare`: hadronic taus vs quark/gluon jets.

Each event is one jet with scalar branches (run, event, jet_pt, jet_eta, jet_phi, jet_mass,
label: 1 = tau, 0 = quark/gluon) and a variable number of constituents (jagged branches
trk_pt, trk_deta, trk_dphi, trk_charge with their counter ntrk). Taus are narrow with few,
hard constituents; q/g jets are wider with more, softer ones; the classes overlap so the task is
not trivial. Deterministic for a given seed (file i uses seed + i).

    python examples/make_root_ntuples.py data/ntuples --files 4 --events 20000 --seed 1
"""

from __future__ import annotations

import argparse
from pathlib import Path

import awkward as ak
import numpy as np
import uproot


def make_events(n: int, rng: np.random.Generator, first_event: int = 0) -> dict:
    """One file's worth of jets, as uproot's writer takes them."""
    label = (rng.random(n) < 0.5).astype(np.int32)
    tau = label == 1
    pt = rng.exponential(40.0, n) + 20.0
    ntrk = np.where(tau, rng.poisson(3.0, n) + 1, rng.poisson(5.0, n) + 1).astype(np.int32)
    total = int(ntrk.sum())
    jet_of = np.repeat(np.arange(n), ntrk)
    width = np.where(tau, 0.06, 0.09)[jet_of] * rng.uniform(0.5, 1.7, n)[jet_of]
    frac = rng.gamma(np.where(tau, 1.2, 0.9)[jet_of], 1.0)
    frac /= np.bincount(jet_of, frac, minlength=n)[jet_of]
    trk = ak.zip({
        "pt": ak.unflatten((frac * pt[jet_of]).astype(np.float32), ntrk),
        "deta": ak.unflatten(rng.normal(0, width).astype(np.float32), ntrk),
        "dphi": ak.unflatten(rng.normal(0, width).astype(np.float32), ntrk),
        "charge": ak.unflatten(rng.choice(np.array([-1, 0, 1], np.int32), total), ntrk),
    })
    order = ak.argsort(trk.pt, ascending=False)
    mass = np.where(tau, rng.normal(1.5, 0.8, n), rng.gamma(2.0, 1.6, n)).clip(0.1)
    return {
        "run": np.full(n, 300000 + int(rng.integers(1000)), np.int64),
        "event": np.arange(first_event, first_event + n, dtype=np.int64),
        "jet_pt": pt.astype(np.float32),
        "jet_eta": rng.uniform(-2.5, 2.5, n).astype(np.float32),
        "jet_phi": rng.uniform(-np.pi, np.pi, n).astype(np.float32),
        "jet_mass": mass.astype(np.float32),
        "label": label,
        "trk": trk[order],
    }


def write_file(path: Path, n: int, seed: int, first_event: int = 0, tree: str = "events",
               basket: int = 10000) -> None:
    """One ROOT file with TTree ``tree`` of ``n`` jets, in baskets of ``basket`` entries (LZ4)."""
    events = make_events(n, np.random.default_rng(seed), first_event)
    with uproot.recreate(path, compression=uproot.LZ4(1)) as fh:
        for start in range(0, n, basket):
            part = {k: v[start:start + basket] for k, v in events.items()}
            if start == 0:
                fh.mktree(tree, part)  # a TTree (``fh[tree] = ...`` may write an RNTuple)
            else:
                fh[tree].extend(part)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", type=Path, help="folder for ntuple_<i>.root")
    ap.add_argument("--files", type=int, default=4)
    ap.add_argument("--events", type=int, default=20000, help="events per file")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    for i in range(args.files):
        write_file(args.out / f"ntuple_{i}.root", args.events, args.seed + i, i * args.events)
    print(f"wrote {args.files} files x {args.events} events to {args.out}")


if __name__ == "__main__":
    main()
