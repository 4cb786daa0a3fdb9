"""Alembic's entry point for the checkpoint store's migrations.

``SqlCheckpointStore`` passes its open connection in ``config.attributes["connection"]``, inside a
transaction it holds; without one (a developer generating the next revision, see
docs/local-stack.md), an engine is made from ``-x url=...`` or the ``sqlalchemy.url`` option.
"""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection

import strata.projector.auditindex.store  # noqa: F401  (its tables join Base.metadata for autogenerate)
from strata.projector.checkpoints.sql import Base, open_engine


def run(connection: Connection) -> None:
    # SQLite alters a table by copying it ("batch" mode); PostgreSQL alters in place.
    context.configure(
        connection=connection, target_metadata=Base.metadata, render_as_batch=connection.dialect.name == "sqlite"
    )
    with context.begin_transaction():
        context.run_migrations()


connection = context.config.attributes.get("connection")
if connection is not None:
    run(connection)
else:
    url = context.get_x_argument(as_dictionary=True).get("url") or context.config.get_main_option("sqlalchemy.url")
    if not url:
        raise SystemExit("migrations: pass the database with -x url=<SQLAlchemy URL>")
    engine = open_engine(url)
    try:
        with engine.connect() as conn:
            run(conn)
    finally:
        engine.dispose()
