"""The quark/gluon preprocessing function of examples/physics/prepare.yaml.

One file, two samples: the ``quark`` sample keeps the jets whose leading jet is a quark
(``jet1ID`` 1-6), the ``gluon`` sample those that are a gluon (21); gridml tells the function
which sample it reads (``sample=``) and gives ``y`` from the sample's label. The leading jet's
tracks are TLorentzVectors (MeV): they become (Δη, Δφ) to the jet axis, log pT (GeV), and the
charge read from the file (``jet1TrksChg``), one ``tracks`` collection.
"""

from __future__ import annotations

from typing import Any

import awkward as ak
import numpy as np


def _pt_eta_phi(p: Any) -> tuple[Any, Any, Any]:
    pt = np.hypot(p.fX, p.fY)
    return pt, np.arcsinh(p.fZ / pt), np.arctan2(p.fY, p.fX)


def process(events: ak.Array, params: dict[str, Any], sample: str | None = None) -> dict[str, Any]:
    flavour = np.asarray(events.jet1ID)
    keep = flavour == 21 if sample == "gluon" else (flavour >= 1) & (flavour <= 6)
    ev = events[keep]
    jet_pt, jet_eta, jet_phi = _pt_eta_phi(ev.jet1P4.fP)
    pt, eta, phi = _pt_eta_phi(ev.jet1TrksP4.fP)
    dphi = phi - jet_phi
    return {
        "selected": keep,
        "x": {"jet_log_pt": np.log(np.asarray(jet_pt) / 1000.0), "jet_eta": np.asarray(jet_eta)},
        "collections": {"tracks": {"trk_deta": eta - jet_eta,
                                   "trk_dphi": np.arctan2(np.sin(dphi), np.cos(dphi)),
                                   "trk_log_pt": np.log(np.maximum(pt, 1.0) / 1000.0)}},
    }
