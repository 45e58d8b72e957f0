"""The server says stop: every rank ends cleanly after that epoch and the trial is 'pruned'."""

from __future__ import annotations

import json
import threading
from http.server import ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.helpers import JsonHandler

from test_payload_train import run_payload, write_trial

pytestmark = pytest.mark.slow


class _StopAfterFirst(JsonHandler):
    """Accepts reports; answers should-stop with stop once epoch 1 is stored."""

    epochs: list[int] = []

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
        if self.path.endswith("/epochs"):
            self.epochs.append(body["epoch"])
        self._reply(201, {})

    def do_GET(self) -> None:
        self._reply(200, {"stop": 1 in self.epochs, "reason": "worse than the median"})


def test_should_stop_prunes_the_trial_on_all_ranks(tmp_path: Path) -> None:
    from make_sample_data import make_sample_data

    _StopAfterFirst.epochs = []
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _StopAfterFirst)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        train, val = make_sample_data(tmp_path / "data", n_train=3000, n_val=500, n_files=1)
        trial = write_trial(tmp_path, train, val, training={"epochs": 5}, early_stopping=True,
                            api={"url": f"http://127.0.0.1:{httpd.server_address[1]}",
                                 "token": "t"})
        proc = run_payload(trial)
    finally:
        httpd.shutdown()
        httpd.server_close()
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads((tmp_path / "outputs" / "result.json").read_text())
    assert result["state"] == "pruned" and result["epochs"] == 1
    assert result["reason"] == "worse than the median"
    assert _StopAfterFirst.epochs == [1]
    assert (tmp_path / "outputs" / "model.keras").exists()
