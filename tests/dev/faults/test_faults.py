"""The fault-injection scenarios of `strata faults`, in their quick form (the full runs: scripts/faults.sh)."""

from __future__ import annotations

from pathlib import Path

import pytest

from strata.dev.faults import FaultContext, scenario
from strata.log.config import Settings


def _run(name: str, settings: Settings, tmp_path: Path) -> None:
    result = scenario(name)(FaultContext(settings, tmp_path, quick=True, log=lambda _m: None))
    # a str, shown whole: pytest cuts the middle out of an object's repr, the notes with it
    assert result.ok, f"{result.passed}/{result.runs} passed: {result}"


@pytest.mark.kafka
def test_projector_crash(broker: Settings, tmp_path: Path):
    _run("projector-crash", broker, tmp_path)


@pytest.mark.kafka
@pytest.mark.kube
def test_binder_crash(broker: Settings, kubeconfig: str, tmp_path: Path):
    _run("binder-crash", broker.with_(kubeconfig=kubeconfig), tmp_path)


@pytest.mark.kafka
def test_load(broker: Settings, tmp_path: Path):
    _run("load", broker, tmp_path)


@pytest.mark.kafka
@pytest.mark.kube
def test_watch_gaps(broker: Settings, kubeconfig: str, tmp_path: Path):
    _run("watch-gaps", broker.with_(kubeconfig=kubeconfig), tmp_path)


@pytest.mark.kafka
def test_broker_loss(broker: Settings, tmp_path: Path):
    # three brokers of its own on other ports; the suite's broker only lends its data directory
    _run("broker-loss", broker, tmp_path)
