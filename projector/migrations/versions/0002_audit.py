"""The audit index: records by offset, and their subjects (pods, uids, jobs, nodes...).

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-29
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | Sequence[str] | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "audit_logs",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("topic", sa.String(length=249), nullable=False),
        sa.Column("cluster_id", sa.String(length=255), nullable=False),
        sa.Column("fold", sa.Text(), nullable=False),
        sa.Column("indexed_to", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_audit_logs")),
        sa.UniqueConstraint("topic", "cluster_id", "fold", name=op.f("uq_audit_logs_topic_cluster_id_fold")),
    )
    op.create_table(
        "audit_records",
        sa.Column("log_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("offset", sa.BigInteger(), nullable=False),
        sa.Column("time_ms", sa.BigInteger(), nullable=False),
        sa.Column("type", sa.String(length=32), nullable=False),
        sa.Column("summary", sa.Text(), nullable=False),
        sa.ForeignKeyConstraint(
            ["log_id"], ["audit_logs.id"], name=op.f("fk_audit_records_log_id_audit_logs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("log_id", "offset", name=op.f("pk_audit_records")),
    )
    op.create_table(
        "audit_subjects",
        sa.Column("log_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("subject", sa.String(length=600), nullable=False),
        sa.Column("offset", sa.BigInteger(), nullable=False),
        sa.ForeignKeyConstraint(
            ["log_id"], ["audit_logs.id"], name=op.f("fk_audit_subjects_log_id_audit_logs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("log_id", "subject", "offset", name=op.f("pk_audit_subjects")),
    )


def downgrade() -> None:
    op.drop_table("audit_subjects")
    op.drop_table("audit_records")
    op.drop_table("audit_logs")
