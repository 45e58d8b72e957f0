"""The grid nickname: the spec's, or panda-client's own reading of the OIDC token; never a prompt."""

from __future__ import annotations

from pathlib import Path

import pytest

from gridml.errors import ExecutorError
from gridml.executors.panda.request import PLACEHOLDER_NICK, resolve_nickname
from gridml.spec import Spec
from tests.panda_double import make_token

SPEC = {"name": "nick", "payload": {"model": "m.py"},
        "data": {"train": "user.x:a", "validation": "user.x:b"}, "training": {"epochs": 1},
        "search": {"space": {"u": {"type": "int", "low": 1, "high": 4}}}}


@pytest.fixture
def no_credentials(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for key in ("PANDA_AUTH", "PANDA_AUTH_VO", "OIDC_AUTH_TOKEN_FILE", "PANDA_AUTH_ID_TOKEN",
                "OIDC_AUTH_ID_TOKEN"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("X509_USER_PROXY", str(tmp_path / "none"))
    monkeypatch.setenv("PANDA_CONFIG_ROOT", str(tmp_path))
    monkeypatch.setenv("PANDA_BEHIND_REAL_LB", "1")


def test_the_spec_nickname_wins() -> None:
    spec = Spec.model_validate({**SPEC, "panda": {"nickname": "jdoe"}})
    assert resolve_nickname(spec.panda.model_dump()) == "jdoe"


def test_without_nickname_or_credentials_submission_is_refused_and_dry_run_shows_a_placeholder(
        no_credentials: None) -> None:
    spec = Spec.model_validate(SPEC)
    with pytest.raises(ExecutorError, match="no grid nickname: panda.nickname is not set"):
        resolve_nickname(spec.panda.model_dump())
    assert resolve_nickname(spec.panda.model_dump(), dry_run=True) == PLACEHOLDER_NICK


def test_the_nickname_comes_from_the_oidc_token_through_panda_client(
        no_credentials: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text(make_token(nickname="asmith"))
    monkeypatch.setenv("PANDA_AUTH", "oidc")
    monkeypatch.setenv("PANDA_AUTH_VO", "atlas")
    monkeypatch.setenv("OIDC_AUTH_TOKEN_FILE", str(token))
    from pandaclient import PsubUtils

    monkeypatch.setattr(PsubUtils, "cacheVomsInfo", None)  # panda-client caches its first answer
    assert resolve_nickname(Spec.model_validate(SPEC).panda.model_dump()) == "asmith"
