"""The pieces of the server's hardening on their own: body sizes, the JSON depth scan, the admin
token's file (0600) and which server the client sends it to."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from gridml.errors import UsageError
from gridml.server.admin import creation_policy, is_loopback
from gridml.server.limits import MAX_DEPTH, parse_size, shown, too_deep
from gridml.settings import read_admin_token, write_admin_token
from gridml.store.client import admin_token


@pytest.mark.parametrize("text,size", [("8MiB", 8 * 1024**2), ("8M", 8 * 1000**2),
                                       ("500kB", 500_000), ("64KiB", 65536), ("1048576", 1048576),
                                       (" 2 GiB ", 2 * 1024**3)])
def test_sizes(text: str, size: int) -> None:
    assert parse_size(text) == size


@pytest.mark.parametrize("text", ["8 parsecs", "-5M", "", "M", "10"])
def test_bad_sizes_are_refused(text: str) -> None:
    with pytest.raises(ValueError):
        parse_size(text)


def test_limits_are_shown_with_their_unit() -> None:
    assert shown(8 * 1024**2) == "8 MiB (8388608 bytes)"
    assert shown(1500) == "1500 bytes"


def test_depth_scan() -> None:
    def nested(n: int) -> bytes:
        return b"[" * n + b"]" * n

    assert not too_deep(nested(MAX_DEPTH))
    assert too_deep(nested(MAX_DEPTH + 1))
    assert too_deep(b'{"a":' * 5000 + b"1" + b"}" * 5000)
    wide = json.dumps([[1, 2]] * 100_000).encode()  # many brackets, shallow
    assert not too_deep(wide)
    in_strings = json.dumps({"s": "[" * 5000, "t": '\\"[{' * 100}).encode()
    assert not too_deep(in_strings)


def test_the_token_file_is_0600_even_if_it_existed_wider(tmp_path: Path) -> None:
    path = tmp_path / "admin-token"
    path.write_text("old\n")
    path.chmod(0o644)
    write_admin_token(path, "gma_" + "x" * 20)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert read_admin_token(path) == "gma_" + "x" * 20
    assert read_admin_token(tmp_path / "none") is None


def test_creation_policy(tmp_path: Path) -> None:
    path = tmp_path / "t"
    token, kept, line = creation_policy(None, path, False, "127.0.0.1")
    assert token.startswith("gma_") and kept == path and token in line
    assert creation_policy(None, path, False, "0.0.0.0")[0] == token  # a restart keeps it
    assert creation_policy("given-token-of-20-chars", path, True, "::1")[0] == "given-token-of-20-chars"
    assert read_admin_token(path) == "given-token-of-20-chars"
    with pytest.raises(UsageError, match="loopback"):
        creation_policy(None, path, True, "0.0.0.0")
    with pytest.raises(UsageError, match="16 characters"):
        creation_policy("short", path, False, "127.0.0.1")


@pytest.mark.parametrize("host,loop", [("127.0.0.1", True), ("::1", True), ("localhost", True),
                                       ("10.0.0.1", False), (None, False), ("example.org", False)])
def test_loopback(host: str | None, loop: bool) -> None:
    assert is_loopback(host) is loop


def test_the_token_file_goes_only_to_a_server_on_this_machine(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GRIDML_ADMIN_TOKEN_FILE", str(tmp_path / "admin-token"))
    monkeypatch.delenv("GRIDML_ADMIN_TOKEN", raising=False)
    write_admin_token(tmp_path / "admin-token", "gma_local-token-xxxxxxxx")
    assert admin_token("http://127.0.0.1:8765") == "gma_local-token-xxxxxxxx"
    assert admin_token("http://192.0.2.1:8765") is None  # TEST-NET: never this machine
    assert admin_token("http://192.0.2.1:8765", "gma_given") == "gma_given"
    assert admin_token("http://127.0.0.1:8765", "gms_study") == "gma_local-token-xxxxxxxx"
    monkeypatch.setenv("GRIDML_ADMIN_TOKEN", "gma_from-env")
    assert admin_token("http://192.0.2.1:8765") == "gma_from-env"
