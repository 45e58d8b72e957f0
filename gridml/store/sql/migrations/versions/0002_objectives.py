"""Several objectives: a trial keeps all its objective values and its constraint violations.

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-10
"""
import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("trials") as batch:  # batch: SQLite cannot ALTER freely
        batch.add_column(sa.Column("objectives", sa.JSON, nullable=True))
        batch.add_column(sa.Column("violations", sa.JSON, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("trials") as batch:
        batch.drop_column("violations")
        batch.drop_column("objectives")
