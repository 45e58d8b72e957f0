"""Sample data: a physics-flavoured toy, hadronic taus (label 1) vs quark/gluon jets (label 0).

Each jet has ten kinematic and shape features. Taus are narrow, low-mass, low-multiplicity
(1 or 3 prongs), isolated, with a hard leading track and displaced tracks; QCD jets are wider,
heavier and busier. The distributions overlap on purpose (resolution smearing, 3-prong taus that
look like jets, narrow quark jets), so a good classifier reaches an AUC of about 0.9, not 1.

Files are chunked (4096 rows), gzip-compressed HDF5 with datasets ``x`` (N, F) float32 and
``y`` (N,) float32, and the feature names in ``x.attrs["features"]``. With ``ragged=True`` each
jet also gets its tracks, a variable-length collection stored as ``gridml prepare`` stores one:
``tracks_values`` (M, 2) float32 (pT fraction, distance to the jet axis; all jets' tracks one
after the other) and ``tracks_lengths`` (N,) int32 (= the n_tracks feature).

    gridml demo-data --out data/ --n-train 60000 --n-val 15000 --files 3     # shipped command
    python examples/make_sample_data.py --out data/ ...                      # the same, from a clone
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import h5py
import numpy as np

FEATURES = (
    "pt", "eta", "phi", "mass", "n_tracks", "lead_track_frac",
    "jet_width", "isolation", "ip_significance", "em_fraction",
)
CHUNK_ROWS = 4096


def _taus(rng: np.random.Generator, n: int) -> np.ndarray:
    """Hadronic tau candidates: 1- or 3-prong, narrow, light, isolated, displaced."""
    prongs = np.where(rng.random(n) < 0.7, 1, 3) + rng.poisson(1.3, n)  # + pile-up, conversions
    pt = 20.0 + rng.exponential(35.0, n)
    mass = np.clip(rng.normal(0.9 + 0.3 * (prongs >= 3), 0.7, n), 0.14, None) + 0.01 * pt
    lead = np.clip(rng.beta(4.0, 2.2, n) / np.sqrt(prongs / 1.5), 0.02, 1.0)
    width = np.abs(rng.normal(0.06, 0.04, n)) * (1 + 0.25 * (prongs >= 3))
    iso = rng.exponential(3.5, n) + 0.03 * pt * rng.random(n)
    ip = np.abs(rng.normal(0.0, 1.7, n)) + rng.exponential(0.4, n)
    em = rng.beta(2.5, 3.0, n)
    return _stack(rng, n, pt, mass, prongs, lead, width, iso, ip, em)


def _qcd(rng: np.random.Generator, n: int) -> np.ndarray:
    """Quark and gluon jets: busier, wider, heavier; quark jets (40%) look more tau-like."""
    quark = rng.random(n) < 0.4
    tracks = rng.poisson(np.where(quark, 2.0, 4.5), n) + 1
    pt = 20.0 + rng.exponential(28.0, n)
    mass = np.abs(rng.normal(0.06 * pt, 0.035 * pt + 0.8, n)) + 0.14
    lead = np.clip(rng.beta(2.3, 3.0, n) * np.where(quark, 1.25, 0.95), 0.02, 1.0)
    width = np.abs(rng.normal(np.where(quark, 0.07, 0.1), 0.05, n))
    iso = rng.exponential(np.where(quark, 4.5, 7.0), n)
    ip = np.abs(rng.normal(0.0, 1.4, n)) + rng.exponential(0.35, n)
    em = rng.beta(2.0, 3.0, n)
    return _stack(rng, n, pt, mass, tracks, lead, width, iso, ip, em)


def _stack(rng: np.random.Generator, n: int, *cols: np.ndarray) -> np.ndarray:
    """Columns in FEATURES order; eta and phi carry no information (as in real life, nearly)."""
    pt, mass, tracks, lead, width, iso, ip, em = cols
    eta = rng.uniform(-2.5, 2.5, n)
    phi = rng.uniform(-np.pi, np.pi, n)
    full = (pt, eta, phi, mass, tracks, lead, width, iso, ip, em)
    return np.stack([np.asarray(c, dtype=np.float64) for c in full], axis=1).astype(np.float32)


def make_events(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    """``n`` events, half taus, shuffled: returns (x (n, F) float32, y (n,) float32)."""
    n_tau = n // 2
    x = np.concatenate([_taus(rng, n_tau), _qcd(rng, n - n_tau)])
    y = np.concatenate([np.ones(n_tau, np.float32), np.zeros(n - n_tau, np.float32)])
    order = rng.permutation(n)
    return x[order], y[order]


def make_tracks(rng: np.random.Generator, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each jet's tracks: pT fractions led by lead_track_frac, distances set by jet_width."""
    n = x[:, FEATURES.index("n_tracks")].astype(np.int32)
    lead = np.repeat(x[:, FEATURES.index("lead_track_frac")], n)
    width = np.repeat(x[:, FEATURES.index("jet_width")], n)
    first = np.zeros(int(n.sum()), bool)
    first[np.concatenate([[0], np.cumsum(n)[:-1]])] = True
    frac = np.where(first, lead, (1 - lead) * rng.beta(1.0, 3.0, len(lead)))
    dr = np.abs(rng.normal(0.0, width + 0.01))
    return np.stack([frac, dr], 1).astype(np.float32), n


def write_h5(path: Path, x: np.ndarray, y: np.ndarray, chunk_rows: int = CHUNK_ROWS,
             tracks: tuple[np.ndarray, np.ndarray] | None = None) -> Path:
    """Write one chunked, gzip-compressed file with datasets ``x``, ``y`` (and the tracks)."""
    rows = max(1, min(chunk_rows, len(x)))
    with h5py.File(path, "w") as f:
        if tracks is not None:
            values, lengths = tracks
            f.create_dataset("tracks_values", data=values, chunks=(max(1, min(4 * rows,
                             len(values))), 2), compression="gzip", compression_opts=4)
            f.create_dataset("tracks_lengths", data=lengths, chunks=(rows,), compression="gzip")
        dx = f.create_dataset("x", data=x, chunks=(rows, x.shape[1]), compression="gzip",
                              compression_opts=4, shuffle=True)
        dx.attrs["features"] = np.array(FEATURES, dtype=h5py.string_dtype())
        f.create_dataset("y", data=y, chunks=(rows,), compression="gzip", compression_opts=4,
                         shuffle=True)
        f.attrs["description"] = "toy hadronic taus (y=1) vs quark/gluon jets (y=0)"
    return path


def _write_split(out_dir: Path, prefix: str, rng: np.random.Generator, n: int,
                 n_files: int, ragged: bool) -> list[Path]:
    x, y = make_events(rng, n)
    bounds = np.linspace(0, n, n_files + 1).astype(int)
    out = []
    for i, (a, b) in enumerate(zip(bounds[:-1], bounds[1:])):
        if b > a:
            tracks = make_tracks(rng, x[a:b]) if ragged else None
            out.append(write_h5(out_dir / f"{prefix}_{i:03d}.h5", x[a:b], y[a:b], tracks=tracks))
    return out


def make_sample_data(out_dir: Path, n_train: int = 60000, n_val: int = 15000, n_files: int = 3,
                     seed: int = 1, ragged: bool = False) -> tuple[list[Path], list[Path]]:
    """Write ``n_files`` training and ``n_files`` validation files; returns both path lists."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    train = _write_split(out_dir, "train", rng, n_train, n_files, ragged)
    val = _write_split(out_dir, "val", rng, n_val, n_files, ragged)
    return train, val


QUICKSTART_DIDS = ("user.demo:quickstart.train", "user.demo:quickstart.val")


def demo_data(out_dir: Path | None = None, *, n_train: int = 60000, n_val: int = 15000,
              n_files: int = 3, seed: int = 1, ragged: bool = False, register: bool = True,
              backend: str | None = None) -> dict[str, Any]:
    """`gridml demo-data`: write the sample files (default $GRIDML_HOME/sample-data) and, with
    ``register``, put them into the data store as the datasets examples/quickstart*.yaml read
    (user.demo:quickstart.train / .val). Datasets already there are left as they are."""
    from gridml.settings import settings

    out = Path(out_dir) if out_dir is not None else settings().home / "sample-data"
    train, val = make_sample_data(out, n_train, n_val, n_files, seed, ragged)
    doc: dict[str, Any] = {"dir": str(out), "files": [str(p) for p in train + val],
                           "registered": [], "existing": []}
    if register:
        from gridml.data import open_data_manager

        dm = open_data_manager(backend)
        for did, files in zip(QUICKSTART_DIDS, (train, val)):
            if dm.exists(did):
                doc["existing"].append(did)
                continue
            dm.upload(list(files), did)
            doc["registered"].append(did)
        doc["where"] = dm.where
    return doc


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, required=True, help="directory to write the files into")
    p.add_argument("--n-train", type=int, default=60000)
    p.add_argument("--n-val", type=int, default=15000)
    p.add_argument("--files", type=int, default=3, help="files per split")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--ragged", action="store_true", help="also write each jet's tracks")
    a = p.parse_args(argv)
    train, val = make_sample_data(a.out, a.n_train, a.n_val, a.files, a.seed, a.ragged)
    for path in train + val:
        print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
