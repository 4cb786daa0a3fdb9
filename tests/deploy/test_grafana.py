"""The Grafana dashboard against a real Prometheus scraping a running stack: every PromQL query of
deploy/grafana/strata.json returns data, and `up`, lag and readiness behave through a projector
restart. The processes are real (`strata project`, `schedule`, `bind`, `evict`, `ingest`) on the
real broker and kube-apiserver; the Prometheus is the local stack's (Debian's package)."""

from __future__ import annotations

import json
import subprocess
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from strata.log.cachelog import CacheLogReader
from strata.log.config import Settings
from strata.log.topics import TopicNames
from tests.binder.support import eventually
from tests.cli.test_log import env_of
from tests.conftest import REPO
from tests.test_health import CONFORMANCE, WAIT_S, publish, started

pytestmark = pytest.mark.kafka
DASHBOARD = REPO / "deploy" / "grafana" / "strata.json"
KINDS = ("Node", "Pod", "PodGroup", "Queue", "PriorityClass", "CSINode", "HyperNode")


def dashboard_queries() -> list[tuple[str, str]]:
    panels = json.loads(DASHBOARD.read_text())["panels"]
    return [(p["title"], t["expr"]) for p in panels for t in p.get("targets", [])]


def blind(url: str, queries: list[tuple[str, str]]) -> list[str]:
    """The panels whose query returns no series (what a checker of the dashboard reports)."""
    from strata.dev.stack.prometheus import query

    return [f"{title}: {expr}" for title, expr in queries if not query(url, expr)]


class Scraped:
    """The stack's processes, each registered with Prometheus under its component's job."""

    def __init__(self, data_dir: Path, run: str) -> None:
        self.data_dir, self.run, self.names = data_dir, run, []

    def register(self, component: str, port: int) -> None:
        from strata.dev.stack.prometheus import register_target

        name = f"{self.run}-{component}"
        register_target(self.data_dir, name, port, {"job": f"strata-{component}", "run": self.run})
        self.names.append(name)

    def close(self) -> None:
        from strata.dev.stack.prometheus import unregister_target

        for name in self.names:
            unregister_target(self.data_dir, name)


def promql(url: str, expr: str) -> list[dict[str, Any]]:
    from strata.dev.stack.prometheus import query

    return query(url, expr)


def value_of(url: str, expr: str) -> float:
    result = promql(url, expr)
    assert len(result) == 1, (expr, result)
    return float(result[0]["value"][1])


def test_every_dashboard_query_has_data_and_a_projector_restart_shows(
    kafka: Settings, kubeconfig: str, prometheus: tuple[str, Path], tmp_path: Path
) -> None:
    url, data_dir = prometheus
    run = f"t{uuid.uuid4().hex[:8]}"
    env = {
        **env_of(kafka),
        "KUBECONFIG": kubeconfig,
        "STRATA_DB_URL": f"sqlite:///{tmp_path / 'cp.db'}",
        "STRATA_DIGEST_EVERY": "5",
    }
    lines = (CONFORMANCE / "c01.jsonl").read_text().splitlines()
    # HyperNode is held back: the projector must show not ready in Prometheus until it is SYNCED
    publish(env, lines + [json.dumps({"type": "SYNCED", "kind": k}) for k in KINDS if k != "HyperNode"], tmp_path)
    _poison(kafka)
    scraped = Scraped(data_dir, run)
    projector = ["project", "--checkpoint-every", "5", "--checkpoint-seconds", "0.5", "--replica", f"{run}-p"]
    try:
        with (
            started(projector, env) as (proj, proj_port),
            started(["schedule", "--replica", f"{run}-s", "--kinds", "Node"], env) as (_, sched_port),
            started(["bind", "--workers", "1", "--instance", f"{run}-b"], env) as (_, bind_port),
            started(["evict", "--workers", "1", "--instance", f"{run}-e"], env) as (_, evict_port),
            started(["ingest", "--kinds", "Node,PriorityClass"], env) as (_, ingest_port),
        ):
            for component, port in [
                ("projector", proj_port),
                ("scheduler", sched_port),
                ("binder", bind_port),
                ("evictor", evict_port),
                ("ingest", ingest_port),
            ]:
                scraped.register(component, port)
            ready = f'strata_ready{{job="strata-projector",run="{run}"}}'
            eventually(lambda: _equals(url, ready, 0.0), timeout_s=WAIT_S)
            publish(env, [json.dumps({"type": "SYNCED", "kind": "HyperNode"})], tmp_path)
            eventually(lambda: _equals(url, ready, 1.0), timeout_s=WAIT_S)
            # records keep arriving, so rates are not all zero and checkpoints keep being written
            _trickle(kafka, tmp_path, lambda: eventually(lambda: _no_blind_panel(url), timeout_s=90))
            _restart_projector(url, run, proj, projector, kafka, env, tmp_path, scraped)
    finally:
        scraped.close()


def test_the_checker_reports_a_blind_panel(prometheus: tuple[str, Path]) -> None:
    url, _ = prometheus
    wrong = [("a misspelt metric", "sum by (job) (rate(strata_records_aplied_total[1m]))")]
    assert blind(url, wrong) == ["a misspelt metric: sum by (job) (rate(strata_records_aplied_total[1m]))"]


def _no_blind_panel(url: str) -> None:
    missing = blind(url, dashboard_queries())
    assert not missing, "panels without data:\n" + "\n".join(missing)


def _trickle(settings: Settings, tmp_path: Path, until: Callable[[], None]) -> None:
    """Publish a PriorityClass change every half second on a thread while ``until`` runs."""
    import threading

    from strata.ingest.from_trace import publish_trace

    done = threading.Event()
    trace = tmp_path / "trickle.jsonl"

    def publish_changes() -> None:
        n = 0
        while not done.wait(0.5):
            n += 1
            obj = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "value": n}
            obj["metadata"] = {"name": "trickle", "uid": "trickle-1", "resourceVersion": str(n)}
            trace.write_text(json.dumps({"type": "MODIFIED" if n > 1 else "ADDED", "object": obj}) + "\n")
            publish_trace(settings, trace)

    thread = threading.Thread(target=publish_changes, daemon=True)
    thread.start()
    try:
        until()
    finally:
        done.set()
        thread.join(30)


def _restart_projector(
    url: str,
    run: str,
    proj: subprocess.Popen[str],
    argv: list[str],
    settings: Settings,
    env: dict[str, str],
    tmp_path: Path,
    scraped: Scraped,
) -> None:
    up = f'up{{job="strata-projector",run="{run}"}}'
    ready = f'strata_ready{{job="strata-projector",run="{run}"}}'
    lag = f'strata_lag_records{{job="strata-projector",run="{run}"}}'
    applied = f'strata_applied_version{{job="strata-projector",run="{run}"}}'
    proj.terminate()
    proj.wait(60)
    eventually(lambda: _equals(url, up, 0.0), timeout_s=WAIT_S)
    assert promql(url, ready) == []  # a target that is down has no readiness, not a stale 1
    publish(env, [json.dumps({"type": "SYNCED", "kind": "Node"})] * 3, tmp_path)  # the log grows meanwhile
    end = CacheLogReader(settings).end_offset()
    with started(argv, env) as (_, port):
        scraped.register("projector", port)
        eventually(lambda: _equals(url, up, 1.0), timeout_s=WAIT_S)
        # ingest keeps publishing what the shared apiserver does: at least the end, and no lag
        eventually(lambda: _at_least(url, applied, float(end)), timeout_s=WAIT_S)
        eventually(lambda: _equals(url, lag, 0.0), timeout_s=WAIT_S)
        eventually(lambda: _equals(url, ready, 1.0), timeout_s=WAIT_S)


def _equals(url: str, expr: str, expected: float) -> None:
    assert value_of(url, expr) == expected


def _at_least(url: str, expr: str, expected: float) -> None:
    assert value_of(url, expr) >= expected


def _poison(settings: Settings) -> None:
    """One message that is no record of ours: the projector quarantines and counts it."""
    from confluent_kafka import Producer

    producer = Producer(settings.client_config())
    producer.produce(TopicNames(settings.topic_prefix).cache_log, b"not an avro record")
    assert producer.flush(10) == 0
    time.sleep(0)  # the next publish may follow at once
