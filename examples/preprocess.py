"""Example preprocessing module for `gridml prepare` (examples/prep.yaml).

gridml calls ``process(events, params)`` once per chunk of events. ``events`` is an awkward
Array with one record per event (the branches named in the spec; jagged branches are
variable-length lists); ``params`` is the spec's preprocess.params. Return a dict:

    x         {name: array}: per-event scalars (N,), fixed vectors (N, k), or variable-length
              collections (N, var) that the spec pads/truncates (features.pad) or keeps ragged
              (features.ragged)
    y         (N,) labels
    w         optional (N,) event weights
    selected  optional boolean mask over the chunk's events: which events the N rows are
              (needed whenever the function drops events)

Derived jet-shape variables below are the usual tau-ID ones: leading-constituent pT fraction,
pT-weighted width, charge sum, number of constituents.
"""

from __future__ import annotations

import awkward as ak
import numpy as np


def process(events: ak.Array, params: dict) -> dict:
    keep = (events.jet_pt > params.get("min_pt", 20.0)) & (events.ntrk > 0)
    ev = events[keep]
    order = ak.argsort(ev.trk_pt, axis=1, ascending=False)  # hardest constituent first
    frac = (ev.trk_pt / ev.jet_pt)[order]
    deta, dphi = ev.trk_deta[order], ev.trk_dphi[order]
    dr = np.sqrt(deta**2 + dphi**2)
    return {
        "selected": keep,
        "x": {
            "log_pt": np.log(ev.jet_pt),
            "eta": ev.jet_eta,
            "mass": ev.jet_mass,
            "ntrk": ev.ntrk,
            "lead_frac": ak.max(frac, axis=1),
            "width": ak.sum(frac * dr, axis=1) / ak.sum(frac, axis=1),
            "charge_sum": ak.sum(ev.trk_charge, axis=1),
            "trk_frac": frac,  # variable-length: padded to a fixed length by the spec
            "trk_deta": deta,
            "trk_dphi": dphi,
        },
        "y": ev.label,
    }
