"""`--http-port` of the long-running commands: /healthz, /readyz and /metrics of real processes on
the real broker. Readiness must stay 503 (with its reason) until the fold is restored, caught up
and every required kind is SYNCED: a replica must never schedule from a half-built cache."""

from __future__ import annotations

import re
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from strata.health import Health, HealthServer
from strata.log.config import Settings
from tests.binder.support import eventually
from tests.cli.test_log import env_of
from tests.paths import CONFORMANCE

pytestmark = pytest.mark.kafka
STRATA = str(Path(sys.executable).with_name("strata"))
WAIT_S = 60.0  # a process started here gets this long to become ready under a loaded machine
CONFORMANCE = CONFORMANCE


def get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def metric(text: str, name: str, labels: str = "") -> float:
    m = re.search(rf"^{re.escape(name + labels)} (\S+)$", text, re.M)
    assert m, f"{name}{labels} not in /metrics"
    return float(m.group(1))


@contextmanager
def started(argv: list[str], env: dict[str, str]) -> Iterator[tuple[subprocess.Popen[str], int]]:
    """A command with ``--http-port 0``, and the port it printed."""
    proc = subprocess.Popen(
        [STRATA, *argv, "--http-port", "0"], env=env, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True
    )
    try:
        assert proc.stderr is not None
        for line in proc.stderr:
            m = re.search(r"http://127\.0\.0\.1:(\d+)/readyz", line)
            if m:
                break
        else:
            raise AssertionError(f"{argv[0]} printed no address; exit {proc.wait()}")
        yield proc, int(m.group(1))
    finally:
        proc.terminate()
        proc.wait(60)


def publish(env: dict[str, str], lines: list[str], tmp_path: Path) -> None:
    trace = tmp_path / f"t{time.monotonic_ns()}.jsonl"
    trace.write_text("".join(line + "\n" for line in lines))
    done = subprocess.run([STRATA, "ingest", "--from", str(trace)], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_probes_of_a_bare_server_can_fail() -> None:
    """The checker itself: a loop that stops beating is reported dead; a condition that does not
    hold keeps readiness at 503 with its reason; once it holds, readiness stays."""
    health = Health("test", stall_after_s=0.2)
    server = HealthServer(health, 0)
    try:
        assert get(server.port, "/readyz") == (503, "test: starting\n")
        waiting = ["not yet"]
        health.require(lambda: waiting[0] if waiting else None)
        assert get(server.port, "/readyz") == (503, "test: not yet\n")
        waiting.clear()
        assert get(server.port, "/readyz") == (200, "ready\n")
        waiting.append("late")  # readiness does not drop back (a burst of lag is no reason to pull a replica)
        assert get(server.port, "/readyz")[0] == 200
        assert get(server.port, "/healthz") == (200, "ok (starting)\n")
        health.beat()
        assert get(server.port, "/healthz")[0] == 200
        time.sleep(0.3)
        status, text = get(server.port, "/healthz")
        assert status == 503 and "no progress for" in text
        assert get(server.port, "/nothing")[0] == 404
    finally:
        server.close()


def test_projector_ready_only_when_restored_caught_up_and_synced(kafka: Settings, tmp_path: Path) -> None:
    env = {**env_of(kafka), "STRATA_DB_URL": f"sqlite:///{tmp_path / 'cp.db'}"}
    lines = (CONFORMANCE / "c01.jsonl").read_text().splitlines()
    publish(env, lines, tmp_path)
    argv = ["project", "--kinds", "Node,Pod", "--checkpoint-every", "50"]
    with started(argv, env) as (_, port):
        status, reason = eventually(lambda: _settled(port), timeout_s=WAIT_S)
        assert status == 503 and "waiting for Node, Pod to be SYNCED" in reason, reason
        publish(env, ['{"type":"SYNCED","kind":"Node"}', '{"type":"SYNCED","kind":"Pod"}'], tmp_path)
        eventually(lambda: _assert_status(port, "/readyz", 200), timeout_s=WAIT_S)
        assert get(port, "/healthz")[0] == 200
        end = len(lines) + 2

        def exported() -> str:
            text = get(port, "/metrics")[1]
            assert metric(text, "strata_applied_version") == end
            assert metric(text, "strata_log_end_offset") == end
            assert metric(text, "strata_lag_records") == 0
            assert metric(text, "strata_lag_seconds") == 0
            assert metric(text, "strata_ready", '{component="projector"}') == 1
            assert metric(text, "strata_checkpoints_total") >= 1
            assert metric(text, "strata_checkpoint_bytes") > 0
            assert metric(text, "strata_checkpoint_age_seconds") >= 0
            return text

        text = eventually(exported, timeout_s=WAIT_S)
        assert metric(text, "strata_records_applied_total", '{kind="Node",type="SYNCED"}') == 1
        pods_added = sum('"type":"ADDED","object":{"apiVersion":"v1","kind":"Pod"' in line for line in lines)
        assert pods_added > 0
        assert metric(text, "strata_records_applied_total", '{kind="Pod",type="ADDED"}') == pods_added
        applied = sum(float(v) for v in re.findall(r"^strata_records_applied_total\{.*\} (\S+)$", text, re.M))
        assert applied == end
        assert 'strata_build_info{component="projector"' in text
        assert "process_resident_memory_bytes" in text


def _settled(port: int) -> tuple[int, str]:
    """/readyz once the projector has restored and caught up (only SYNCED is missing then)."""
    status, text = get(port, "/readyz")
    assert "SYNCED" in text or status == 200, text
    return status, text


def _assert_status(port: int, path: str, expected: int) -> None:
    status, text = get(port, path)
    assert status == expected, text


def test_scheduler_not_ready_before_its_kinds_sync(kafka: Settings, tmp_path: Path) -> None:
    env = {**env_of(kafka), "STRATA_DB_URL": f"sqlite:///{tmp_path / 'cp.db'}"}
    publish(env, (CONFORMANCE / "c01.jsonl").read_text().splitlines()[:20], tmp_path)
    with started(["schedule", "--replica", "r1", "--kinds", "Node"], env) as (_, port):
        eventually(lambda: _assert_reason(port, "scheduler: waiting for Node to be SYNCED"), timeout_s=WAIT_S)
        publish(env, ['{"type":"SYNCED","kind":"Node"}'], tmp_path)
        eventually(lambda: _assert_status(port, "/readyz", 200), timeout_s=WAIT_S)
        text = get(port, "/metrics")[1]
        assert metric(text, "strata_applied_version") == 21
        assert metric(text, "strata_ready", '{component="scheduler"}') == 1


def _assert_reason(port: int, reason: str) -> None:
    status, text = get(port, "/readyz")
    assert (status, text.strip()) == (503, reason), text


def test_ingest_ready_once_listed_with_api_and_watch_metrics(kafka: Settings, kubeconfig: str) -> None:
    env = {**env_of(kafka), "KUBECONFIG": kubeconfig}
    with started(["ingest", "--kinds", "Node,PriorityClass"], env) as (_, port):
        eventually(lambda: _assert_status(port, "/readyz", 200), timeout_s=WAIT_S)
        text = get(port, "/metrics")[1]
        assert metric(text, "strata_watch_relists_total", '{kind="Node"}') >= 1
        assert metric(text, "strata_kube_api_request_duration_seconds_count", '{verb="LIST"}') >= 2
        assert metric(text, "strata_ready", '{component="ingest"}') == 1


def test_binder_ready_once_its_parts_run_and_the_dispatcher_caught_up(
    kafka: Settings, kubeconfig: str, tmp_path: Path
) -> None:
    env = {**env_of(kafka), "KUBECONFIG": kubeconfig, "STRATA_DB_URL": f"sqlite:///{tmp_path / 'cp.db'}"}
    publish(env, (CONFORMANCE / "c01.jsonl").read_text().splitlines()[:30], tmp_path)
    with started(["bind", "--workers", "1", "--instance", "health-test"], env) as (_, port):
        eventually(lambda: _assert_status(port, "/readyz", 200), timeout_s=WAIT_S)
        text = eventually(lambda: _dispatched_to(port, 30), timeout_s=WAIT_S)
        assert metric(text, "strata_ready", '{component="binder"}') == 1


def _dispatched_to(port: int, version: int) -> str:
    """The dispatcher has folded at least ``version`` records (its binder may append outcomes)."""
    text = get(port, "/metrics")[1]
    assert metric(text, "strata_applied_version") >= version
    return text
