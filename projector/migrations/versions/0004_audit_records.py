"""The audit index's blocks hold each record as the log holds it, not its summary.

A block of ``audit_blocks`` now keeps the messages themselves with the fold's outcome and pod
context (``projector/auditindex/store.py``), and readers derive the summaries. The tables stay; their
rows are in the old format, so they are deleted and each log's ``indexed_to`` goes back to 0: the
index derives from the cache log, which is kept forever, and the next `strata project` rebuilds it
as it folds the log again (as 0003 did).

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-02
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | Sequence[str] | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _forget() -> None:
    op.execute(sa.text("DELETE FROM audit_postings"))
    op.execute(sa.text("DELETE FROM audit_blocks"))
    op.execute(sa.text("UPDATE audit_logs SET indexed_to = 0"))


def upgrade() -> None:
    _forget()


def downgrade() -> None:
    _forget()
