"""Each component with its own ServiceAccount token, bound by deploy/rbac/: `strata ingest`,
`strata bind`, `strata evict` and a replica's status writes do their job against the real
kube-apiserver and are refused (403) the rest (the fault scenario ``rbac``)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from strata.config import Settings
from strata.faults import FaultContext
from strata.faults.rbac import run

pytestmark = [pytest.mark.kafka, pytest.mark.kube]


def test_each_component_does_its_job_with_its_own_token_and_nothing_else(
    broker: Settings, kubeconfig: str, tmp_path: Path
):
    lines: list[str] = []
    started = time.monotonic()
    result = run(FaultContext(broker.with_(kubeconfig=kubeconfig), tmp_path / "rbac", quick=True, log=lines.append))
    assert result.ok, (result, lines)
    assert result.runs >= 30 and not result.notes
    assert time.monotonic() - started < 240
    assert not list((tmp_path / "rbac").glob("*.kubeconfig"))  # the tokens' files are gone
