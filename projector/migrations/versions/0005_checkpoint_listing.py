"""A covering index for listing checkpoints.

SQLite keeps a row's columns in order, and ``size`` and ``created_at`` come after the ``state``
blob: listing the checkpoints (the UI does, to weigh a restore against its anchors) read every
checkpoint's whole blob through its overflow pages to reach them, about 2 ms per checkpoint of
18 MB. The index holds every column the listing reads, so SQLite answers it from the index alone.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-06
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0005"
down_revision: str | Sequence[str] | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

COLUMNS = ["topic", "cluster_id", "fold", "version", "digest", "size", "created_at"]


def upgrade() -> None:
    op.create_index("ix_checkpoints_listed", "checkpoints", COLUMNS)


def downgrade() -> None:
    op.drop_index("ix_checkpoints_listed", table_name="checkpoints")
