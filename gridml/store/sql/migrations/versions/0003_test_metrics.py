"""The test split: a trial keeps the figures of its one evaluation on data.test, apart from its
epochs (never an objective, never seen by the searcher).

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-27
"""
import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("trials") as batch:  # batch: SQLite cannot ALTER freely
        batch.add_column(sa.Column("test_metrics", sa.JSON, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("trials") as batch:
        batch.drop_column("test_metrics")
