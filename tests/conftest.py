"""Shared fixtures. Tests marked ``kafka`` run against the real broker that `strata dev up`
starts (or the one STRATA_KAFKA_BOOTSTRAP names); each test gets topics of its own prefix."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest

from strata.config import Settings, settings_from
from strata.topics import ensure_topics

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def broker() -> Settings:
    if os.environ.get("STRATA_KAFKA_BOOTSTRAP"):
        return settings_from()
    from strata.devstack import Stack

    env = Stack(Path(os.environ.get("STRATA_DATA_DIR") or REPO / ".strata")).up()
    return settings_from(bootstrap=env["STRATA_KAFKA_BOOTSTRAP"], data_dir=env["STRATA_DATA_DIR"])


@pytest.fixture
def kafka(broker: Settings) -> Settings:
    """Settings with a fresh topic prefix whose topics exist."""
    settings = broker.with_(topic_prefix=f"test-{uuid.uuid4().hex[:12]}.", command_partitions=2)
    ensure_topics(settings)
    return settings
