"""The poison scenario of `strata faults` in its quick form: 1,000 malformed messages in a real cache log."""

from __future__ import annotations

from pathlib import Path

import pytest

from strata.dev.faults import FaultContext, scenario
from strata.log.config import Settings


@pytest.mark.kafka
def test_poison(broker: Settings, tmp_path: Path):
    result = scenario("poison")(FaultContext(broker, tmp_path, quick=True, log=lambda _m: None))
    assert result.ok, result
    assert result.records_lost == 0 and result.digest_mismatches == 0
