"""The audit index in compressed blocks with postings per (subject, block).

Replaces ``audit_records`` (a JSON summary per record) and ``audit_subjects`` (a row per subject
and record), about 870 bytes a record, with ``audit_blocks`` and ``audit_postings`` (see
``projector/auditindex/store.py``). The old tables are dropped, not converted: the index is derived
from the cache log, which is kept forever, and converting a long index here would hold every
projector's startup for as long as rebuilding it. Each log's ``indexed_to`` goes back to 0, so
the next `strata project` restores from its checkpoint at or below 0 (an empty state) and
rebuilds the index as it folds the log again.

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | Sequence[str] | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_LOG_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.drop_table("audit_subjects")
    op.drop_table("audit_records")
    op.execute(sa.text("UPDATE audit_logs SET indexed_to = 0"))
    op.create_table(
        "audit_blocks",
        sa.Column("log_id", _LOG_ID, nullable=False),
        sa.Column("first_offset", sa.BigInteger(), nullable=False),
        sa.Column("last_offset", sa.BigInteger(), nullable=False),
        sa.Column("first_ms", sa.BigInteger(), nullable=False),
        sa.Column("last_ms", sa.BigInteger(), nullable=False),
        sa.Column("data", sa.LargeBinary(), nullable=False),
        sa.ForeignKeyConstraint(
            ["log_id"], ["audit_logs.id"], name=op.f("fk_audit_blocks_log_id_audit_logs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("log_id", "first_offset", name=op.f("pk_audit_blocks")),
    )
    op.create_table(
        "audit_postings",
        sa.Column("log_id", _LOG_ID, nullable=False),
        sa.Column("subject_key", sa.BigInteger(), nullable=False),
        sa.Column("first_offset", sa.BigInteger(), nullable=False),
        sa.ForeignKeyConstraint(
            ["log_id"], ["audit_logs.id"], name=op.f("fk_audit_postings_log_id_audit_logs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("log_id", "subject_key", "first_offset", name=op.f("pk_audit_postings")),
        sqlite_with_rowid=False,
    )


def downgrade() -> None:
    op.drop_table("audit_postings")
    op.drop_table("audit_blocks")
    op.execute(sa.text("UPDATE audit_logs SET indexed_to = 0"))
    op.create_table(
        "audit_records",
        sa.Column("log_id", _LOG_ID, nullable=False),
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
        sa.Column("log_id", _LOG_ID, nullable=False),
        sa.Column("subject", sa.String(length=600), nullable=False),
        sa.Column("offset", sa.BigInteger(), nullable=False),
        sa.ForeignKeyConstraint(
            ["log_id"], ["audit_logs.id"], name=op.f("fk_audit_subjects_log_id_audit_logs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("log_id", "subject", "offset", name=op.f("pk_audit_subjects")),
    )
