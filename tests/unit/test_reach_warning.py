"""`gridml validate`'s one line where early stopping and stall detection cannot act: PanDA worker
nodes (no folder shared with the controller) without a backend.server they can reach."""

from __future__ import annotations

from typing import Any

import pytest

from gridml.executors.reach import live_channel_warning
from gridml.spec import Spec

SPEC: dict[str, Any] = {
    "name": "reach", "payload": {"model": "m.py"},
    "data": {"train": "user.x:a", "validation": "user.x:b"}, "training": {"epochs": 1},
    "search": {"objective": "val_loss",
               "space": {"u": {"type": "int", "low": 1, "high": 4}}}}


def spec(executor: str, server: str, early: bool = False) -> Spec:
    search = {**SPEC["search"], **({"early_stopping": {"rule": "median"}} if early else {})}
    return Spec.model_validate({**SPEC, "search": search,
                                "backend": {"executor": executor, "server": server}})


@pytest.mark.parametrize("server", ["embedded", "http://127.0.0.1:8765", "http://localhost:1",
                                    "https://[::1]:8443"])
def test_panda_without_a_reachable_server_is_said_in_one_line(server: str) -> None:
    line = live_channel_warning(spec("panda", server, early=True))
    assert line is not None and "\n" not in line
    assert line.startswith("warning: backend.server: ")
    assert "early stopping" in line and "stall detection" in line and "cannot act" in line
    assert "fix: set backend.server to the URL of a `gridml serve` reachable from the worker " \
           "nodes" in line
    # without a rule, only stall detection is named
    plain = live_channel_warning(spec("panda", server))
    assert plain is not None and "early stopping" not in plain and "stall detection" in plain


@pytest.mark.parametrize(("executor", "server"), [
    ("panda", "https://gridml.example.org:8765"),  # a server the nodes can reach
    ("panda", "http://10.1.2.3:8765"),
    ("slurm", "embedded"),  # the shared folder carries the channel
    ("local", "embedded"),
])
def test_nothing_is_said_where_the_channel_works(executor: str, server: str) -> None:
    assert live_channel_warning(spec(executor, server)) is None
