"""The local stack's Prometheus scraping a real process that serves prometheus-client metrics,
registered through a target file, queried with PromQL over the HTTP API."""

from __future__ import annotations

import re
import socket
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from strata.dev.stack.prometheus import PrometheusServer, query, register_target, targets_dir, unregister_target
from strata.errors import StrataError
from strata.log.config import Settings
from tests.binder.support import eventually
from tests.cli.test_cli import run

EXPORTER = (
    "import sys, time, prometheus_client as p; "
    "p.Gauge('strata_test_answer', 'a fixed value').set(42); "
    "p.start_http_server(int(sys.argv[1]), addr='127.0.0.1'); time.sleep(600)"
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def values(url: str, promql: str) -> list[str]:
    return [series["value"][1] for series in query(url, promql)]


@pytest.fixture
def exporter() -> Iterator[tuple[subprocess.Popen[bytes], int]]:
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-c", EXPORTER, str(port)])
    yield proc, port
    proc.kill()
    proc.wait()


def test_a_registered_process_is_scraped_and_its_loss_seen(prometheus, exporter):
    url, data_dir = prometheus
    proc, port = exporter
    job = f"strata-test-{uuid.uuid4().hex[:8]}"
    path = register_target(data_dir, job, port, {"component": "exporter"})
    try:
        assert path.parent == targets_dir(data_dir)

        def is_up() -> None:
            assert values(url, f'up{{job="{job}"}}') == ["1"]

        eventually(is_up, timeout_s=20.0)
        (answer,) = query(url, f'strata_test_answer{{job="{job}"}}')
        assert answer["value"][1] == "42"
        assert answer["metric"]["instance"] == f"127.0.0.1:{port}" and answer["metric"]["component"] == "exporter"

        proc.kill()
        proc.wait()

        def is_down() -> None:
            assert values(url, f'up{{job="{job}"}}') == ["0"]

        eventually(is_down, timeout_s=20.0)
        with pytest.raises(AssertionError):  # the check that can fail: a dead target is never up
            eventually(is_up, timeout_s=2)
    finally:
        assert unregister_target(data_dir, job)

    def is_gone() -> None:
        assert values(url, f'up{{job="{job}"}}') == []

    eventually(is_gone, timeout_s=20.0)  # a removed target's series go stale
    assert not unregister_target(data_dir, job)


def test_queries_that_match_nothing_or_are_wrong(prometheus):
    url, _ = prometheus
    assert query(url, 'up{job="never-registered"}') == []
    assert values(url, "1 + 1") == ["2"]  # a scalar answers one row
    with pytest.raises(StrataError, match=re.escape("Prometheus rejected 'up{': ")):
        query(url, "up{")
    with pytest.raises(ValueError):
        register_target(Path("/nonexistent"), "../escape", 1)


@pytest.mark.kafka
def test_dev_up_exports_the_url_and_status_tells(broker: Settings, prometheus):
    url, data_dir = prometheus
    if Path(broker.data_dir).resolve() != data_dir.resolve() or url != PrometheusServer(data_dir).url:
        pytest.skip("the Prometheus under test is not the local stack's")
    env = {"STRATA_DATA_DIR": str(data_dir)}
    up = run("dev", "up", "--no-kube", env=env)
    assert up.returncode == 0, up.stderr
    assert f"export STRATA_PROMETHEUS_URL={url}" in up.stdout.splitlines()
    assert any(line.startswith("prometheus already running (pid ") for line in up.stderr.splitlines()), up.stderr
    state = PrometheusServer(data_dir).running()
    assert state is not None
    assert f"prometheus: running (pid {state.pid}) at {url}" in run("dev", "status", env=env).stdout.splitlines()
