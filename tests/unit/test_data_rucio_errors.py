"""The Rucio error boundary, on rucio-clients' own exception classes: translation and retries."""

from __future__ import annotations

import pytest
from rucio.common import exception as rx

from gridml.data.base import DID
from gridml.data.rucio_errors import call, is_transient, translate
from gridml.errors import ChecksumError, DataError, NotFoundError

WHERE = "Rucio at http://127.0.0.1:1 (account jdoe)"


DS = DID("user.jdoe", "ds")


def _tr(exc: BaseException, did: DID | str | None = DS) -> Exception:
    return translate(exc, action="upload", did=did, where=WHERE, account="jdoe")


@pytest.mark.parametrize("exc, kind, words", [
    (rx.DataIdentifierNotFound("Data identifier 'user.jdoe:ds' not found"), NotFoundError,
     ["user.jdoe:ds", "gridml data put"]),
    (rx.CannotAuthenticate("Cannot authenticate to account jdoe with given credentials"), DataError,
     ["refused the credentials of account jdoe", "RUCIO_CONFIG"]),
    (rx.AccessDenied("Account jdoe can not add replicas on X"), DataError,
     ["may not upload", "user.jdoe", "GRIDML_RUCIO_RSE"]),
    (rx.InsufficientAccountLimit("not enough quota"), DataError, ["no quota left", "--rse"]),
    (rx.RSEOverQuota("over quota"), DataError, ["no quota left"]),
    (rx.DataIdentifierAlreadyExists("exists"), DataError, ["immutable"]),
    (rx.RSENotFound("RSE 'X' cannot be found"), DataError, ["no RSE of that name", "list-rses"]),
    (rx.ServerConnectionException(), DataError, ["cannot reach " + WHERE, "rucio_host"]),
    (rx.FileConsistencyMismatch("adler32 differs"), ChecksumError, ["checksum mismatch"]),
    (rx.InvalidObject("bad"), DataError, ["Rucio refused to upload", "InvalidObject"]),
])
def test_translation_names_what_and_the_fix(exc: Exception, kind: type, words: list[str]) -> None:
    err = _tr(exc)
    assert type(err) is kind
    text = str(err)
    assert "\n" not in text and all(w in text for w in words), text


def test_transient_errors_are_retried_then_translated(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GRIDML_RUCIO_RETRIES", "3")
    monkeypatch.setenv("GRIDML_RUCIO_BACKOFF", "0.01")
    attempts: list[int] = []

    def flaky() -> str:
        attempts.append(1)
        if len(attempts) < 3:
            raise rx.ServerConnectionException()
        return "done"

    assert call(flaky, action="list", did=None, where=WHERE) == "done" and len(attempts) == 3
    attempts.clear()

    def down() -> None:
        attempts.append(1)
        raise rx.ServiceUnavailable("503")

    with pytest.raises(DataError, match="cannot reach"):
        call(down, action="list", did=None, where=WHERE)
    assert len(attempts) == 4  # first try + 3 retries


def test_permanent_errors_are_not_retried() -> None:
    attempts: list[int] = []

    def denied() -> None:
        attempts.append(1)
        raise rx.AccessDenied("no")

    with pytest.raises(DataError):
        call(denied, action="upload", did=DID("user.x", "y"), where=WHERE)
    assert attempts == [1]
    assert not is_transient(rx.RucioException("Unknown exception. (http status code: 500)"))
    assert is_transient(rx.RucioException("Unknown exception. (http status code: 503)"))


def test_unreadable_or_server_configs_are_refused_before_any_call(
        tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    from gridml.data.rucio import RucioStore

    monkeypatch.setenv("RUCIO_CONFIG", str(tmp_path / "missing.cfg"))
    with pytest.raises(DataError, match="cannot be read"):
        RucioStore()
    cfg = tmp_path / "rucio.cfg"
    cfg.write_text("[client]\nrucio_host = http://127.0.0.1:1\n[database]\ndefault = sqlite://\n")
    monkeypatch.setenv("RUCIO_CONFIG", str(cfg))
    with pytest.raises(DataError, match=r"\[database\] section"):
        RucioStore()
