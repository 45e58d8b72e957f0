"""Initial schema: studies, trials, epochs, tokens (sha256 only), trial outputs.

Revision ID: 0001
Revises:
Create Date: 2026-11-22
"""
import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "studies",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("name", sa.String(200), nullable=False, unique=True),
        sa.Column("spec", sa.JSON, nullable=False),
        sa.Column("spec_hash", sa.String(64), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("created", TS, nullable=False),
    )
    op.create_table(
        "trials",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("study_id", sa.Integer, sa.ForeignKey("studies.id", ondelete="CASCADE"),
                  nullable=False, index=True),
        sa.Column("number", sa.Integer, nullable=False),
        sa.Column("hparams", sa.JSON, nullable=False),
        sa.Column("state", sa.String(16), nullable=False, index=True),
        sa.Column("objective", sa.Float, nullable=True),
        sa.Column("epochs_done", sa.Integer, nullable=False),
        sa.Column("error", sa.Text, nullable=True),
        sa.Column("source", sa.String(16), nullable=False),
        sa.Column("external_id", sa.String(200), nullable=True),
        sa.Column("attempts", sa.Integer, nullable=False),
        sa.Column("last_heartbeat", TS, nullable=True),
        sa.Column("created", TS, nullable=False),
        sa.Column("started", TS, nullable=True),
        sa.Column("finished", TS, nullable=True),
        sa.UniqueConstraint("study_id", "number", name="uq_trials_study_number"),
    )
    op.create_table(
        "epochs",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("trial_id", sa.Integer, sa.ForeignKey("trials.id", ondelete="CASCADE"),
                  nullable=False),
        sa.Column("epoch", sa.Integer, nullable=False),
        sa.Column("body", sa.JSON, nullable=False),
        sa.Column("body_hash", sa.String(64), nullable=False),
        sa.Column("created", TS, nullable=False),
        sa.UniqueConstraint("trial_id", "epoch", name="uq_epochs_trial_epoch"),
    )
    op.create_table(
        "tokens",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("token_hash", sa.String(64), nullable=False, unique=True),
        sa.Column("study_id", sa.Integer, sa.ForeignKey("studies.id", ondelete="CASCADE"),
                  nullable=False, index=True),
        sa.Column("trial_id", sa.Integer, sa.ForeignKey("trials.id", ondelete="CASCADE"),
                  nullable=True, index=True),
        sa.Column("created", TS, nullable=False),
    )
    op.create_table(
        "trial_outputs",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("trial_id", sa.Integer, sa.ForeignKey("trials.id", ondelete="CASCADE"),
                  nullable=False, index=True),
        sa.Column("did", sa.String(500), nullable=False),
        sa.Column("name", sa.String(500), nullable=False),
        sa.Column("bytes", sa.BigInteger, nullable=True),
        sa.Column("adler32", sa.String(8), nullable=True),
        sa.Column("extra", sa.JSON, nullable=False),
    )


def downgrade() -> None:
    for table in ("trial_outputs", "tokens", "epochs", "trials", "studies"):
        op.drop_table(table)
