"""gridml/server/ports.py: ports for the daemons the tests and ServerProcess start."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from gridml.server import ports


def test_a_port_below_the_ephemeral_range_and_free() -> None:
    low = ports.ephemeral_low()
    got = {ports.pick() for _ in range(20)}
    assert all(ports.LOWEST <= p < low for p in got), (got, low)
    with socket.socket() as s:  # free on every address: a daemon can bind it
        s.bind(("", got.pop()))


def test_the_kernels_choice_where_no_room_is_left_below(monkeypatch: pytest.MonkeyPatch) -> None:
    kernels = ports.ephemeral_low()
    monkeypatch.setattr(ports, "ephemeral_low", lambda: ports.LOWEST + 10)
    assert ports.pick() >= kernels  # bind(("", 0)): from the kernel's ephemeral range, as before


def test_an_unreadable_range_means_linuxs_default(tmp_path: Path) -> None:
    assert ports.ephemeral_low(str(tmp_path / "nowhere")) == 32768
    (tmp_path / "range").write_text("40000\t60999\n")
    assert ports.ephemeral_low(str(tmp_path / "range")) == 40000
