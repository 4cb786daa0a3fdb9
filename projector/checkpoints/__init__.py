"""Checkpoints: the fold's state at one version, stored so that a restart replays only the tail.

``interface`` is the persistence contract (values and the ``CheckpointStore`` Protocol), ``sql``
its SQLAlchemy engine (migrated by Alembic from ``strata/projector/migrations``), ``writer`` the
forked child that renders and stores a checkpoint while the fold goes on.
"""
