"""Each component with its own ServiceAccount token, bound by deploy/rbac/: `strata ingest`,
`strata bind`, `strata evict` and a replica's status writes do their job against the real
kube-apiserver and are refused (403) the rest (the fault scenario ``rbac``)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from strata.dev.faults import FaultContext
from strata.dev.faults.rbac import run
from strata.dev.stack.apiserver import service_account_kubeconfig
from strata.kubeapi import KubeApi
from strata.log.config import Settings
from tests.tokens import apply_component

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


def test_only_tokens_for_the_servers_audience_are_accepted(kubeconfig: str, tmp_path: Path):
    account = apply_component(KubeApi(kubeconfig), "ingest")
    ours = service_account_kubeconfig(Path(kubeconfig), "strata", account, tmp_path / "ours")
    other = service_account_kubeconfig(
        Path(kubeconfig), "strata", account, tmp_path / "other", audiences=["strata-test-elsewhere"]
    )
    assert ours.stat().st_mode & 0o777 == 0o600
    assert KubeApi(str(ours)).call("GET", "/api/v1/nodes", limit=1).status == 200
    assert KubeApi(str(other)).call("GET", "/api/v1/nodes", limit=1).status == 401
