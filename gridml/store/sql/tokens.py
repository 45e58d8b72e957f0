"""Bearer tokens of the SQL store (``gridml.store.protocol.TokenStore``).

Tokens are ``secrets.token_urlsafe`` values handed out once and stored as sha256 only; they are
never logged. Prefixes say what a token opens: ``gms_`` a study, ``gmt_`` a trial.
"""

from __future__ import annotations

import secrets
from typing import Any

from sqlalchemy import delete, select

from gridml.store.sql import convert
from gridml.store.sql.convert import utcnow
from gridml.store.sql.errors import guarded
from gridml.store.sql.models import TokenRow


def new_token(kind: str) -> str:
    """A fresh bearer token; the prefix says what it opens (gms_: study, gmt_: trial)."""
    return f"gm{kind[0]}_{secrets.token_urlsafe(32)}"


@guarded
class TokensMixin:
    """Token methods of ``SqlStore`` (which provides ``engine``, ``_write``, ``_trial_row``)."""

    engine: Any
    _write: Any
    _trial_row: Any

    def check_study_token(self, study_id: int, token: str) -> bool:
        return self.resolve_token(token) == (study_id, None)

    def resolve_token(self, token: str) -> tuple[int, int | None] | None:
        """``(study_id, trial_id or None)`` that ``token`` opens, or None if it opens nothing."""
        with self.engine.connect() as conn:
            row = conn.execute(select(TokenRow.study_id, TokenRow.trial_id)
                               .where(TokenRow.token_hash == convert.sha256(token))).first()
        return None if row is None else (row[0], row[1])

    def issue_study_token(self, study_id: int) -> str:
        """One more token for the study (the ones handed out before keep working): for
        `gridml submit`/`resume` of a study whose first token is not at hand."""
        token = new_token("study")
        with self._write() as s:
            s.add(TokenRow(token_hash=convert.sha256(token), study_id=study_id, trial_id=None,
                           created=utcnow()))
        return token

    def issue_trial_token(self, trial_id: int) -> str:
        token = new_token("trial")
        with self._write() as s:
            trial = self._trial_row(s, trial_id)
            s.execute(delete(TokenRow).where(TokenRow.trial_id == trial_id))
            s.add(TokenRow(token_hash=convert.sha256(token), study_id=trial.study_id,
                           trial_id=trial_id, created=utcnow()))
        return token

    def check_trial_token(self, trial_id: int, token: str) -> bool:
        found = self.resolve_token(token)
        return found is not None and found[1] == trial_id
