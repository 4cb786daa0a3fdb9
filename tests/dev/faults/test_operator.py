"""The operator scenarios of `strata faults` (issue 14), in their quick form: a rolling restart of
every component under load, the binder's and evictor's groups through a broker loss, a retry
tier's pause through a rebalance. Full runs: scripts/faults.sh --only NAME; docs/faults.md."""

from __future__ import annotations

from pathlib import Path

import pytest

from strata.dev.faults import FaultContext, scenario
from strata.log.config import Settings

pytestmark = [pytest.mark.kafka, pytest.mark.kube]


def _run(name: str, settings: Settings, tmp_path: Path) -> None:
    result = scenario(name)(FaultContext(settings, tmp_path, quick=True, log=lambda _m: None))
    assert result.ok, result


def test_rolling_restart(broker: Settings, kubeconfig: str, tmp_path: Path):
    _run("rolling-restart", broker.with_(kubeconfig=kubeconfig), tmp_path)


def test_binder_broker_loss(broker: Settings, kubeconfig: str, tmp_path: Path):
    # three brokers of its own on other ports; the suite's broker only lends its data directory
    _run("binder-broker-loss", broker.with_(kubeconfig=kubeconfig), tmp_path)


def test_retry_repause(broker: Settings, kubeconfig: str, tmp_path: Path):
    _run("retry-repause", broker.with_(kubeconfig=kubeconfig), tmp_path)
