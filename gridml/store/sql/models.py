"""Database tables of the metrics store (SQLAlchemy 2.0 declarative).

These are storage rows, not API shapes: the API's pydantic schemas live in ``gridml.server.schemas``
and the rest of gridml sees the dataclasses of ``gridml.store``. Any change here needs an Alembic
revision in ``gridml/store/sql/migrations/versions``.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    DateTime,
    Float,
    ForeignKey,
    Integer,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


class Base(DeclarativeBase):
    """Declarative base; ``Base.metadata`` is what the initial migration creates."""


class StudyRow(Base):
    __tablename__ = "studies"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(200), unique=True)
    spec: Mapped[dict[str, Any]] = mapped_column(JSON)
    spec_hash: Mapped[str] = mapped_column(String(64))
    state: Mapped[str] = mapped_column(String(16), default="running")
    created: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class TrialRow(Base):
    __tablename__ = "trials"
    __table_args__ = (UniqueConstraint("study_id", "number", name="uq_trials_study_number"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    study_id: Mapped[int] = mapped_column(ForeignKey("studies.id", ondelete="CASCADE"), index=True)
    number: Mapped[int] = mapped_column(Integer)
    hparams: Mapped[dict[str, Any]] = mapped_column(JSON)
    state: Mapped[str] = mapped_column(String(16), default="queued", index=True)
    objective: Mapped[float | None] = mapped_column(Float, nullable=True)
    objectives: Mapped[list[Any] | None] = mapped_column(JSON, nullable=True)  # 0002
    violations: Mapped[list[Any] | None] = mapped_column(JSON, nullable=True)  # 0002
    # the one evaluation on data.test ({name: value}, non-finite as strings): 0003
    test_metrics: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    epochs_done: Mapped[int] = mapped_column(Integer, default=0)
    error: Mapped[str | None] = mapped_column(Text, nullable=True)
    source: Mapped[str] = mapped_column(String(16), default="searcher")
    external_id: Mapped[str | None] = mapped_column(String(200), nullable=True)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    last_heartbeat: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    created: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    started: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    finished: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)


class EpochRow(Base):
    __tablename__ = "epochs"
    __table_args__ = (UniqueConstraint("trial_id", "epoch", name="uq_epochs_trial_epoch"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    trial_id: Mapped[int] = mapped_column(ForeignKey("trials.id", ondelete="CASCADE"))
    epoch: Mapped[int] = mapped_column(Integer)
    body: Mapped[dict[str, Any]] = mapped_column(JSON)  # EpochReport.to_json(), normalised
    body_hash: Mapped[str] = mapped_column(String(64))  # sha256 of the canonical body
    created: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class TokenRow(Base):
    """A bearer token, stored as its sha256 only. ``trial_id`` None: a study token."""

    __tablename__ = "tokens"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    study_id: Mapped[int] = mapped_column(ForeignKey("studies.id", ondelete="CASCADE"), index=True)
    trial_id: Mapped[int | None] = mapped_column(
        ForeignKey("trials.id", ondelete="CASCADE"), nullable=True, index=True)
    created: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class OutputRow(Base):
    """One file a trial produced, as stored in the data store (DID, size, adler32)."""

    __tablename__ = "trial_outputs"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    trial_id: Mapped[int] = mapped_column(ForeignKey("trials.id", ondelete="CASCADE"), index=True)
    did: Mapped[str] = mapped_column(String(500))
    name: Mapped[str] = mapped_column(String(500))
    bytes: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    adler32: Mapped[str | None] = mapped_column(String(8), nullable=True)
    extra: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
