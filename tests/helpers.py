"""Helpers for tests that drive the real `gridml` command and real campaigns."""

from __future__ import annotations

import json
from http.server import BaseHTTPRequestHandler
import os
import re
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def wait_for(cond: Callable[[], T], timeout: float, what: str | Callable[[], str],
             interval: float = 0.05) -> T:
    """Wait until ``cond()`` returns something true and return it; fail the test once ``timeout``
    seconds have passed, naming ``what`` was awaited (a callable: evaluated then, e.g. a log's
    tail). Every wait in the suite goes through here: a condition, a deadline, no idle sleep."""
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if value:
            return value
        if time.monotonic() > deadline:
            detail = what() if callable(what) else what
            raise AssertionError(f"waited {timeout:g} s in vain for {detail}")
        time.sleep(interval)


def gridml(*args: str, env: dict[str, str] | None = None, check: bool = True,
           timeout: float = 900) -> subprocess.CompletedProcess[str]:
    """Run the real CLI in a subprocess (as a user would)."""
    full_env = {**os.environ, "PATH": f"{BIN}:{os.environ.get('PATH', '')}", **(env or {})}
    proc = subprocess.run([str(BIN / "gridml"), *args], capture_output=True, text=True,
                          env=full_env, timeout=timeout, cwd=ROOT)
    if check and proc.returncode != 0:
        raise AssertionError(f"gridml {' '.join(args)} -> {proc.returncode}\n{proc.stdout}\n{proc.stderr}")
    return proc


# Runs the real CLI with SIGINT at its default: a test run started in the background by a
# non-interactive shell (`cmd &`) inherits SIGINT ignored, Python then never raises
# KeyboardInterrupt, and a Ctrl-C test would see a campaign run on to its end. The exec keeps
# the pid, so the test's signals reach gridml itself.
_INTERRUPTIBLE = ("import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); "
                  "os.execv(sys.argv[1], sys.argv[1:])")


def start_gridml(*args: str) -> subprocess.Popen[str]:
    """The real CLI started in the background as a terminal starts it (Ctrl-C interrupts it),
    stdout and stderr piped."""
    env = {**os.environ, "PATH": f"{BIN}:{os.environ.get('PATH', '')}"}
    return subprocess.Popen([sys.executable, "-c", _INTERRUPTIBLE, str(BIN / "gridml"), *args],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def gridml_json(*args: str, **kw: Any) -> Any:
    return json.loads(gridml(*args, "--json", **kw).stdout)


TORCH_PAYLOAD = f"payload:\n  framework: torch\n  model: {ROOT / 'examples' / 'models' / 'deepsets_torch.py'}\n"


def small_search(algorithm: str, seed: int) -> str:
    """A 2-trial search section over the torch example's hparams (2 at a time)."""
    return textwrap.dedent(f"""\
        search:
          algorithm: {algorithm}
          objective: val_loss
          max_trials: 2
          parallel: 2
          seed: {seed}
          space:
            learning_rate: {{type: real, low: 1.0e-3, high: 1.0e-2, log: true}}
            units: {{type: int, low: 8, high: 16}}
        """)


def assert_torch_model_matches_onnx(pt: Path, onnx: Path) -> None:
    """``model.pt`` rebuilds (``torch_model.rebuild``, from the model_source.py beside it) and
    ``model.onnx`` gives its outputs in onnxruntime on 5 rows of the sample data's 10 features;
    in a fresh interpreter, as a user would load them."""
    code = ("import sys, numpy as np, onnxruntime as ort, torch; "
            "from payloads.runtime.torch_model import rebuild; m = rebuild(sys.argv[1]); "
            "x = np.random.default_rng(0).normal(size=(5, 10)).astype('float32'); "
            "s = ort.InferenceSession(sys.argv[2], providers=['CPUExecutionProvider']); "
            "o = s.run(None, {s.get_inputs()[0].name: x})[0]; "
            "t = m(torch.from_numpy(x)).detach().numpy(); "
            "assert o.shape == t.shape and np.allclose(o, t, atol=1e-4), (o, t); print('ok')")
    proc = subprocess.run([sys.executable, "-c", code, str(pt), str(onnx)], capture_output=True,
                          text=True, timeout=300, cwd=ROOT, check=False)
    assert proc.returncode == 0 and "ok" in proc.stdout, proc.stderr[-2000:]


def make_registered_sample_data(tmp: Path, scope: str = "user.test", n_train: int = 4000,
                                n_val: int = 1000, files: int = 2) -> tuple[str, str]:
    """Toy data written with the example generator and registered through `gridml data put`."""
    sys.path.insert(0, str(ROOT / "examples"))
    from make_sample_data import make_sample_data  # type: ignore[import-not-found]

    train, val = make_sample_data(tmp / "data", n_train=n_train, n_val=n_val, n_files=files, seed=3)
    gridml("data", "put", *map(str, train), "--dataset", f"{scope}:toy.train")
    gridml("data", "put", *map(str, val), "--dataset", f"{scope}:toy.val")
    return f"{scope}:toy.train", f"{scope}:toy.val"


def search_section(max_trials: int = 4, parallel: int = 2, algorithm: str = "bayes",
                   seed: int = 7) -> str:
    """The ``search:`` section of the suite's small campaigns (YAML text, for ``write_spec``):
    the example model's four hyperparameters."""
    return textwrap.dedent(f"""\
        search:
          algorithm: {algorithm}
          objective: val_loss
          max_trials: {max_trials}
          parallel: {parallel}
          seed: {seed}
          space:
            learning_rate: {{type: real, low: 1.0e-3, high: 3.0e-2, log: true}}
            units: {{type: int, low: 8, high: 32}}
            dropout: {{type: real, low: 0.0, high: 0.3}}
            activation: {{type: categorical, choices: [relu, tanh]}}
        """)


def write_spec(path: Path, name: str, train: str, val: str, **overrides: str) -> Path:
    """A small campaign spec; ``overrides`` replace whole top-level sections (YAML text)."""
    sections = {
        "payload": f"payload:\n  model: {ROOT / 'examples' / 'models' / 'mlp.py'}\n",
        "data": f"data:\n  train: {train}\n  validation: {val}\n  features: x\n  labels: y\n",
        "training": textwrap.dedent("""\
            training:
              epochs: 2
              batch_size: 128
              metrics: [accuracy, auc]
              workers: 2
            """),
        "search": search_section(),
        "resources": "resources: {cores: 2, gpus: 0, memory_gb: 2, walltime: 20m}\n",
        "backend": "backend: {executor: local, data: local, server: embedded}\n",
    }
    sections.update(overrides)
    path.write_text(f"name: {name}\n" + "".join(sections.values()))
    return path


def register_tiny_datasets(store: Any, tmp: Path, scope: str, rows: int = 8) -> tuple[str, str]:
    """Two tiny HDF5 datasets (train, val) in ``store``, for tests that run no training."""
    import h5py
    import numpy as np

    for which in ("train", "val"):
        f = tmp / f"{which}.h5"
        with h5py.File(f, "w") as h5:
            h5["x"] = np.zeros((rows, 3), "f4")
            h5["y"] = np.zeros(rows, "f4")
        store.upload([f], f"{scope}:{which}")
    return f"{scope}:train", f"{scope}:val"


class JsonHandler(BaseHTTPRequestHandler):
    """Base for tiny stand-in HTTP peers in payload tests: quiet, JSON replies."""

    def log_message(self, *a: Any) -> None:
        pass

    def _reply(self, code: int, body: Any) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


# A one-layer torch model whose every training step pauses: real torchrun payloads (torch starts
# at half TensorFlow's cost) whose epochs last long enough for a test to act while a trial trains
# (kill, freeze, interrupt it), whatever the machine's speed.
_SLOW_TORCH_MODEL = """
import time
from torch import nn


class Slow(nn.Linear):
    def forward(self, x):
        if self.training:
            time.sleep({pause_s})
        return super().forward(x)


def build_model(hparams, input_shape):
    return Slow(int(input_shape[0]), 1)
"""


def slow_torch_payload(folder: Path, pause_s: float = 0.03) -> str:
    """The ``payload:`` section (YAML text, for ``write_spec``) of a torch model written to
    ``folder``: one linear layer whose training steps each sleep ``pause_s`` (validation does not)."""
    model = folder / "slow_linear.py"
    model.write_text(_SLOW_TORCH_MODEL.format(pause_s=pause_s))
    return f"payload:\n  framework: torch\n  model: {model}\n"


EPOCH_LINE = re.compile(r"(\d\d):(\d\d):(\d\d) \[payload r0\] epoch (\d+): .* \| ([\d.]+)s,")


def report_gaps(log: str) -> list[float]:
    """Seconds between one epoch's log line and the next beyond the next epoch's own time: what
    reporting epoch N cost rank 0 (the spool write, a post, the should-stop question)."""
    lines = [(int(h) * 3600 + int(m) * 60 + int(sec), float(took))
             for h, m, sec, _, took in EPOCH_LINE.findall(log)]
    return [(t1 - t0) % 86400 - took for (t0, _), (t1, took) in zip(lines, lines[1:])]
