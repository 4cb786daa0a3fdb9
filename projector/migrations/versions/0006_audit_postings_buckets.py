"""The audit postings, keyed by the stretch of the log they are in before their subject.

A posting's key was (log, subject hash, block): a transaction's postings, hashes, landed all over
the postings' B-tree, and each transaction wrote most of its pages again (3.7 million 512-byte
blocks written for the 1.8 million postings of the 5k/150k history). With the bucket (the block's
first offset divided by 65,536) before the hash, a transaction writes into the last bucket's few
pages (0.2 million blocks; docs/audit.md). The rows are converted, not forgotten: the bucket is
a function of the offset, so no log is indexed again.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-06
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | Sequence[str] | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_LOG_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
_BUCKET_RECORDS = 65536  # auditstore.BLOCK_RECORDS * auditstore.BUCKET_BLOCKS when this was written
_OLD = "audit_postings_old"


def _create(key: tuple[str, ...]) -> None:
    columns = [sa.Column("log_id", _LOG_ID, nullable=False)]
    if "bucket" in key:
        columns.append(sa.Column("bucket", sa.BigInteger(), nullable=False))
    op.create_table(
        "audit_postings",
        *columns,
        sa.Column("subject_key", sa.BigInteger(), nullable=False),
        sa.Column("first_offset", sa.BigInteger(), nullable=False),
        sa.ForeignKeyConstraint(
            ["log_id"], ["audit_logs.id"], name=op.f("fk_audit_postings_log_id_audit_logs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint(*key, name=op.f("pk_audit_postings")),
        sqlite_with_rowid=False,
    )


def _set_aside() -> None:
    """The old table out of the new one's way; PostgreSQL names its primary key's index after the
    constraint, and two indexes may not share a name."""
    op.rename_table("audit_postings", _OLD)
    if op.get_bind().dialect.name == "postgresql":
        op.execute(sa.text(f"ALTER TABLE {_OLD} RENAME CONSTRAINT pk_audit_postings TO pk_{_OLD}"))


def upgrade() -> None:
    _set_aside()
    _create(("log_id", "bucket", "subject_key", "first_offset"))
    op.execute(
        sa.text(
            "INSERT INTO audit_postings (log_id, bucket, subject_key, first_offset) "
            f"SELECT log_id, first_offset / {_BUCKET_RECORDS}, subject_key, first_offset FROM {_OLD}"
        )
    )
    op.drop_table(_OLD)


def downgrade() -> None:
    _set_aside()
    _create(("log_id", "subject_key", "first_offset"))
    op.execute(
        sa.text(
            "INSERT INTO audit_postings (log_id, subject_key, first_offset) "
            f"SELECT log_id, subject_key, first_offset FROM {_OLD}"
        )
    )
    op.drop_table(_OLD)
