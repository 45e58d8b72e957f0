"""Spool and reporter of the payload: durable spool, retries against a real loopback HTTP server."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from collections.abc import Iterator

import pytest

from tests.helpers import JsonHandler

from payloads.runtime.reporter import HttpApi, Reporter
from payloads.runtime.spool import Spool


class _Server:
    """A tiny metrics API: fails the first ``fail`` epoch posts with 503, stores by epoch."""

    def __init__(self, fail: int = 0, stop: bool = False) -> None:
        self.fail, self.stop = fail, stop
        self.epochs: dict[int, dict] = {}
        self.calls: list[tuple[str, str, str | None]] = []
        self.heartbeats = 0

    def handler(self) -> type[BaseHTTPRequestHandler]:
        srv = self

        class H(JsonHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                srv.calls.append(("POST", self.path, self.headers.get("Authorization")))
                if self.path.endswith("/heartbeat"):
                    srv.heartbeats += 1
                    return self._reply(200, {"ok": True})
                if srv.fail > 0:
                    srv.fail -= 1
                    return self._reply(503, {"detail": "busy"})
                old = srv.epochs.get(body["epoch"])
                if old is not None and old != body:
                    return self._reply(409, {"detail": "different body"})
                srv.epochs[body["epoch"]] = body
                self._reply(201 if old is None else 200, {"stored": old is None})

            def do_GET(self) -> None:
                srv.calls.append(("GET", self.path, self.headers.get("Authorization")))
                self._reply(200, {"stop": srv.stop, "reason": "median rule"})

        return H


@pytest.fixture
def api_server() -> Iterator[tuple[_Server, str]]:
    state = _Server()
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), state.handler())
    t = threading.Thread(target=httpd.serve_forever, daemon=True)
    t.start()
    yield state, f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def _report(epoch: int, loss: float = 0.5) -> dict:
    return {"epoch": epoch, "metrics": {"loss": loss}, "epoch_time": 1.0}


def test_spool_is_durable_and_skips_a_torn_line(tmp_path: Path) -> None:
    spool = Spool(tmp_path / "out" / "metrics.jsonl")
    spool.append(_report(1))
    spool.append(_report(2))
    with open(spool.path, "a") as f:
        f.write('{"epoch": 3, "metr')  # killed mid-write
    assert [r["epoch"] for r in spool.read()] == [1, 2]
    spool.truncate_after(1)
    assert [r["epoch"] for r in spool.read()] == [1]


def test_reporter_retries_until_the_server_accepts(tmp_path: Path, api_server) -> None:
    state, url = api_server
    state.fail = 3
    api = HttpApi(url, "tok", 7, backoff=0.01)
    rep = Reporter(Spool(tmp_path / "metrics.jsonl"), api, heartbeat_s=0.05)
    rep.report(_report(1))
    rep.report(_report(2, 0.4))
    rep.close(timeout=10)
    assert sorted(state.epochs) == [1, 2]
    assert rep.posted == [1, 2] and rep.failed == []
    assert [r["epoch"] for r in rep.spool.read()] == [1, 2]
    assert all(c[1].startswith("/api/v1/trials/7/") and c[2] == "Bearer tok" for c in state.calls)
    assert state.heartbeats >= 1


def test_repeated_post_is_harmless_and_conflict_is_not_retried(tmp_path: Path, api_server) -> None:
    state, url = api_server
    api = HttpApi(url, None, 1, backoff=0.01)
    assert api.request("POST", "/epochs", _report(1))[0] == 201
    assert api.request("POST", "/epochs", _report(1))[0] == 200
    n = len(state.calls)
    assert api.request("POST", "/epochs", _report(1, 0.1))[0] == 409
    assert len(state.calls) == n + 1


def test_unreachable_server_leaves_reports_in_the_spool(tmp_path: Path) -> None:
    api = HttpApi("http://127.0.0.1:9", "tok", 1, retries=2, backoff=0.01, timeout=0.5)
    rep = Reporter(Spool(tmp_path / "metrics.jsonl"), api, heartbeat_s=60)
    rep.report(_report(1))
    rep.close(timeout=10)
    assert rep.failed == [1] and rep.posted == []
    assert rep.spool.read()[0]["epoch"] == 1


def test_should_stop_asks_after_the_report_is_stored(tmp_path: Path, api_server) -> None:
    state, url = api_server
    state.stop = True
    rep = Reporter(Spool(tmp_path / "m.jsonl"), HttpApi(url, "t", 3, backoff=0.01), 60)
    rep.report(_report(1))
    assert rep.should_stop() == (True, "median rule")
    assert 1 in state.epochs
    rep.close()
    assert Reporter(Spool(tmp_path / "n.jsonl"), None).should_stop() == (False, "")


# ---- the framework-neutral trial core (payloads/runtime/core.py) ---------------------------------
def _doc(tmp_path: Path, url: str | None, **changes: object):
    from payloads.runtime import trial as contract

    model = tmp_path / "mlp.py"
    model.write_text("def build_model(hparams, input_shape):\n    return None\n")
    return contract.TrialDoc(
        study="core", trial_id=5, trial_number=2, hparams={"units": 4}, model_file=model,
        output_dir=tmp_path / "out", training=contract.Training(epochs=3),
        data=contract.Data(features=("x",), train=("/d/a.h5",)),
        api=contract.Api(url=url, token="t") if url else None, **changes)


def _profile() -> dict:
    from payloads.runtime import profile

    return profile.combine([profile.rank_profile(1.0, 0.8, 0.01, 0, 0.5)], 100)


def test_core_resumes_reports_checkpoints_and_stops(tmp_path: Path, api_server) -> None:
    from payloads.runtime.core import TrialCore
    from payloads.runtime.session import make_reporter

    state, url = api_server
    state.stop = True
    cfg = _doc(tmp_path, url, early_stopping=True)
    cfg.output_dir.mkdir()
    (cfg.output_dir / "result.json").write_text("{}")  # an earlier attempt's
    saved: list[int] = []
    reporter = make_reporter(cfg)
    for e in (1, 2, 3):
        reporter.spool.append(_report(e))
    core = TrialCore(cfg, 0, reporter, lambda obj: obj, restore=lambda: 1, save=saved.append,
                     costs={"n_params": 7.0})
    assert core.resume() == 1
    assert not (cfg.output_dir / "result.json").exists()
    assert [r["epoch"] for r in reporter.spool.read()] == [1]  # epochs 2, 3 run again
    assert core.end_epoch(2, {"loss": float("nan")}, _profile(), lambda: {"cache": {}}) is False
    assert core.stop_reason == "median rule" and saved == [2]
    assert state.epochs[2]["metrics"] == {"loss": None, "n_params": 7.0}
    assert reporter.spool.last_by_epoch()[2] == state.epochs[2]  # spooled as posted

    def save_model(out: Path) -> dict:
        (out / "model.bin").write_bytes(b"m")
        return {"onnx": {"written": False, "reason": "test"}}

    core.finish(save_model, lambda: {"device": "CPU"}, versions={"framework": "test"})
    result = json.loads((cfg.output_dir / "result.json").read_text())
    assert result == {"state": "pruned", "objective_metrics": {"loss": None, "n_params": 7.0},
                      "epochs": 2, "reason": "median rule"}
    prov = json.loads((cfg.output_dir / "provenance.json").read_text())
    assert prov["runtime"]["onnx"]["reason"] == "test" and prov["runtime"]["device"] == "CPU"
    assert prov["runtime"]["posted_epochs"] == [2] and prov["runtime"]["framework"] == "test"


def test_core_on_other_ranks_and_without_checkpoints(tmp_path: Path) -> None:
    from payloads.runtime.core import TrialCore

    from payloads.runtime import trial as contract

    cfg = _doc(tmp_path, None, early_stopping=True).replace(training=contract.Training(
        epochs=3, options=contract.TrainingOptions(checkpoint=False)))
    asked: list[object] = []
    core = TrialCore(cfg, 1, None, lambda obj: asked.append(obj) or (True, ""),
                     restore=lambda: 9, save=lambda e: asked.append(("save", e)))
    assert core.resume() == 0  # no checkpoints kept: nothing restored, start fresh
    assert core.end_epoch(1, {"loss": 1.0}, {}) is False  # rank 1 builds no report
    assert asked == [(False, "")] and core.stop_reason == "the server asked to stop"
    assert core.should_stop(3) is False and len(asked) == 1  # the last epoch asks nothing


def test_json_outputs_are_indented_and_compact_when_big(tmp_path: Path) -> None:
    """provenance.json of a trial over 10,000 files: written compact (the C encoder) above 1 MB,
    indented below; the same document either way."""
    from payloads.runtime.outputs import write_json

    small = {"b": [1, 2], "a": {"x": 1.5}}
    text = write_json(tmp_path / "s.json", small).read_text()
    assert "\n  " in text and json.loads(text) == small
    big = {"inputs": [{"did": f"user.me:f{i:05d}.h5", "adler32": "0a1b2c3d", "bytes": i}
                      for i in range(20_000)], "when": Path("/x")}
    text = write_json(tmp_path / "b.json", big).read_text()
    assert "\n" not in text and len(text) > 2**20
    assert json.loads(text) == {**big, "when": "/x"}  # default=str as before
