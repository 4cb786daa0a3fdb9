"""Volcano's queue gauges computed from snapshots (issue 14, item 2; docs/metrics.md).

The figures are checked against values worked out by hand from the spec's rules, and on every
conformance trace against an oracle read from the trace's expected snapshot (the spec's own
file, not the fold's output); the collector is scraped through a real prometheus_client registry.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from strata.projector import queuemetrics
from strata.projector.fold import queuegauges
from strata.projector.fold.queuegauges import (
    MAX_FLOAT64,
    PHASES,
    QueueFigures,
    capacity_reported,
    queue_figures,
    samples,
)
from strata.projector.fold.resources import nonzero
from strata.projector.fold.snapshot import Snapshot
from strata.projector.queuemetrics import VolcanoCollector
from strata.projector.replay import replay_bytes, replay_file
from tests.paths import CONFORMANCE

CONFORMANCE = CONFORMANCE
CASES = sorted(p.name.removesuffix(".expected.json") for p in CONFORMANCE.glob("*.expected.json"))
GI = 2**30


# ------------------------------------------------------------------------- a handcrafted trace
def _watch(obj: dict[str, Any], op: str = "ADDED") -> dict[str, Any]:
    return {"type": op, "object": obj}


def _queue(name: str, weight: int | None = None, capability: dict[str, str] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {}
    if weight is not None:
        spec["weight"] = weight
    if capability is not None:
        spec["capability"] = capability
    return _watch(
        {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue", "metadata": {"name": name}, "spec": spec}
    )


def _podgroup(name: str, queue: str | None, phase: str) -> dict[str, Any]:
    spec = {"minMember": 2, **({"queue": queue} if queue else {})}
    return _watch(
        {
            "apiVersion": "scheduling.volcano.sh/v1beta1",
            "kind": "PodGroup",
            "metadata": {"name": name, "namespace": "ns", "uid": f"pg-{name}"},
            "spec": spec,
            "status": {"phase": phase},
        }
    )


def _pod(name: str, group: str, phase: str, requests: dict[str, str], node: str = "", deleting: bool = False):
    meta: dict[str, Any] = {
        "name": name,
        "namespace": "ns",
        "uid": f"u-{name}",
        "annotations": {"scheduling.k8s.io/group-name": group},
    }
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    spec: dict[str, Any] = {
        "schedulerName": "volcano",
        "containers": [{"name": "c", "resources": {"requests": requests}}],
    }
    if node:
        spec["nodeName"] = node
    return _watch({"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, "status": {"phase": phase}})


NODE = {"cpu": "8", "memory": "16Gi", "pods": "110", "nvidia.com/gpu": "4"}
WORKER = {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "1"}
LAUNCHER = {"cpu": "2", "memory": "2Gi"}

# q1 holds a running gang (two Running workers, a Succeeded one, one being deleted) and a pending
# gang (two Pending launchers and a third the scheduler has bound, so Binding); q2 and q3 hold
# nothing. PodGroup "lost" names a queue that is not stored and "nameless" the default queue,
# which is not stored either: neither job is shown, so neither counts anywhere.
HANDCRAFTED = [
    _watch({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}, "status": {"allocatable": NODE}}),
    _queue("q1", weight=3, capability={"memory": "8Gi", "nvidia.com/gpu": "2"}),
    _queue("q2", weight=1),
    _queue("q3", capability={"cpu": "2"}),
    _podgroup("running", "q1", "Running"),
    _podgroup("pending", "q1", "Pending"),
    _podgroup("lost", "missing", "Inqueue"),
    _podgroup("nameless", None, "Pending"),
    _pod("r1", "running", "Running", WORKER, node="n1"),
    _pod("r2", "running", "Running", WORKER, node="n1"),
    _pod("r3", "running", "Succeeded", WORKER, node="n1"),
    _pod("r4", "running", "Running", WORKER, node="n1", deleting=True),
    _pod("p1", "pending", "Pending", LAUNCHER),
    _pod("p2", "pending", "Pending", LAUNCHER),
    _pod("p3", "pending", "Pending", {"cpu": "500m", "memory": "512Mi"}),
    {"type": "BIND", "pod": "u-p3", "node": "n1"},
    _pod("x1", "lost", "Pending", LAUNCHER),
    _pod("x2", "nameless", "Running", WORKER, node="n1"),
]


def _snapshot(records: list[dict[str, Any]]) -> Snapshot:
    state, report = replay_bytes(b"\n".join(json.dumps(r).encode() for r in records))
    assert not report.bad and not report.rejected, (report.bad, report.rejected)
    return state.snapshot()


def _counts(**by_phase: int) -> tuple[int, ...]:
    return tuple(by_phase.get(phase, 0) for phase in PHASES)


def test_a_queue_with_a_running_gang_and_a_pending_one():
    """Worked out by hand: allocated = r1 + r2 + p3 (Running, Running, Binding); request adds the
    Pending p1 and p2; r3 (Succeeded) and r4 (Releasing) count in neither; every task adds one pod."""
    q1, q2, q3 = queue_figures(_snapshot(HANDCRAFTED))
    assert q1 == QueueFigures(
        name="q1",
        weight=3,
        allocated={"cpu": 2500, "memory": 2 * GI + GI // 2, "nvidia.com/gpu": 2000, "pods": 3},
        request={"cpu": 6500, "memory": 6 * GI + GI // 2, "nvidia.com/gpu": 2000, "pods": 5},
        capability={"memory": 8 * GI, "nvidia.com/gpu": 2000},
        has_jobs=True,
        pod_groups=_counts(Pending=1, Running=1),
    )
    assert q2 == QueueFigures("q2", 1, {}, {}, {}, False, _counts())
    assert q3 == QueueFigures("q3", 0, {}, {}, {"cpu": 2000}, False, _counts())


def test_the_samples_of_the_handcrafted_trace():
    got = {(s.family.name, s.labels): s.value for s in samples(queue_figures(_snapshot(HANDCRAFTED)))}
    want: dict[tuple[str, tuple[str, ...]], float] = {}
    for queue, cpu, memory in (("q1", 2500, 2.5 * GI), ("q2", 0, 0), ("q3", 0, 0)):
        want["volcano_queue_allocated_milli_cpu", (queue,)] = cpu
        want["volcano_queue_allocated_memory_bytes", (queue,)] = memory
    for queue, cpu, memory in (("q1", 6500, 6.5 * GI), ("q2", 0, 0), ("q3", 0, 0)):
        want["volcano_queue_request_milli_cpu", (queue,)] = cpu
        want["volcano_queue_request_memory_bytes", (queue,)] = memory
    for family, gpu, pods in (("allocated", 2000, 3), ("request", 2000, 5), ("capacity", 2000, 0)):
        want[f"volcano_queue_{family}_scalar_resources", ("q1", "nvidia.com/gpu")] = gpu
        want[f"volcano_queue_{family}_scalar_resources", ("q1", "pods")] = pods
    for queue, weight in (("q1", 3), ("q2", 1), ("q3", 0)):
        want["volcano_queue_weight", (queue,)] = weight
    # q1 has jobs: its unset cpu capability reads as unlimited; q3 has none: its spec as written;
    # q2 has neither jobs nor a capability: no capacity series
    for queue, cpu, memory in (("q1", MAX_FLOAT64, 8 * GI), ("q3", 2000, 0)):
        want["volcano_queue_capacity_milli_cpu", (queue,)] = cpu
        want["volcano_queue_capacity_memory_bytes", (queue,)] = memory
    for queue in ("q1", "q2", "q3"):
        for phase in PHASES:
            want[f"volcano_queue_pod_group_{phase.lower()}_count", (queue,)] = 0
    want["volcano_queue_pod_group_pending_count", ("q1",)] = 1
    want["volcano_queue_pod_group_running_count", ("q1",)] = 1
    assert got == want


@pytest.mark.parametrize(
    ("capability", "has_jobs", "reported"),
    [
        ({}, False, None),  # nothing: the capacity plugin skips a queue without jobs or capability
        ({}, True, (0.0, 0.0, {})),  # attr.capability is an empty Resource
        ({"cpu": 2000}, False, (2000.0, 0.0, {})),  # the spec as written
        ({"cpu": 2000}, True, (2000.0, MAX_FLOAT64, {})),  # memory <= 0 reads as unlimited
        ({"memory": 5, "example.com/fpga": 1000}, True, (MAX_FLOAT64, 5.0, {"example.com/fpga": 1000})),
    ],
)
def test_capacity_as_the_capacity_plugin_reports_it(capability, has_jobs, reported):
    figures = QueueFigures("q", 1, {}, {}, capability, has_jobs, _counts())
    assert capacity_reported(figures) == reported


def test_each_scalar_family_of_a_queue_lists_the_same_resources():
    """Volcano's knownScalarResources is one set per queue: a resource only requested still has
    an allocated series at 0, and so has the capacity a queue with jobs but no capability reports."""
    figures = QueueFigures("q", 1, {"pods": 1}, {"pods": 2, "nvidia.com/gpu": 1000}, {}, True, _counts())
    got = {(s.family.name, s.labels): s.value for s in samples([figures]) if s.family.labels[-1] == "resource"}
    assert got == {
        ("volcano_queue_allocated_scalar_resources", ("q", "nvidia.com/gpu")): 0,
        ("volcano_queue_allocated_scalar_resources", ("q", "pods")): 1,
        ("volcano_queue_request_scalar_resources", ("q", "nvidia.com/gpu")): 1000,
        ("volcano_queue_request_scalar_resources", ("q", "pods")): 2,
        ("volcano_queue_capacity_scalar_resources", ("q", "nvidia.com/gpu")): 0,
        ("volcano_queue_capacity_scalar_resources", ("q", "pods")): 0,
    }


# ------------------------------------------------------------------ the conformance traces
# the spec's rule, written out apart from the code under test: which sums a task's status joins
BOTH = ("allocated", "request")
SUMS: dict[str, tuple[str, ...]] = {"Binding": BOTH, "Bound": BOTH, "Running": BOTH, "Pending": ("request",)}


def oracle(expected: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each queue's figures read from an expected canonical snapshot: the jobs in it are the
    shown ones, their tasks carry status and resreq (non-zero entries only)."""
    queues = {
        name: {
            "weight": q["weight"],
            "capability": q["capability"],
            "allocated": {},
            "request": {},
            "pod_groups": dict.fromkeys(PHASES, 0),
        }
        for name, q in expected["queues"].items()
    }
    for job in expected["jobs"].values():
        queue = queues[job["queue"]]
        if job["podGroupPhase"] in queue["pod_groups"]:
            queue["pod_groups"][job["podGroupPhase"]] += 1
        for task in job["tasks"].values():
            for name in SUMS.get(task["status"], ()):
                for k, v in task["resreq"].items():
                    queue[name][k] = queue[name].get(k, 0) + v
    return queues


def differences(want: dict[str, dict[str, Any]], figures: tuple[QueueFigures, ...]) -> list[str]:
    """Where the figures and the oracle disagree, one line per field."""
    got = {
        f.name: {
            "weight": f.weight,
            "capability": nonzero(f.capability),
            "allocated": nonzero(f.allocated),
            "request": nonzero(f.request),
            "pod_groups": dict(zip(PHASES, f.pod_groups, strict=True)),
        }
        for f in figures
    }
    if list(got) != sorted(want):
        return [f"queues {list(got)} != {sorted(want)}"]
    return [
        f"{name}.{field}: {got[name][field]} != {value}"
        for name, fields in want.items()
        for field, value in fields.items()
        if got[name][field] != value
    ]


def _case(case: str) -> tuple[Snapshot, dict[str, Any]]:
    name, _, until = case.partition(".until-")
    state, _ = replay_file(CONFORMANCE / f"{name}.jsonl", until=int(until) if until else None)
    return state.snapshot(), json.loads((CONFORMANCE / f"{case}.expected.json").read_text(encoding="utf-8"))


@pytest.mark.parametrize("case", CASES)
def test_figures_agree_with_the_expected_snapshot(case: str):
    snapshot, expected = _case(case)
    assert differences(oracle(expected), queue_figures(snapshot)) == []


def test_the_traces_exercise_every_phase_and_status():
    """The oracle test means something only if the traces hold what it sums."""
    _, expected = _case("c06")
    jobs = expected["jobs"].values()
    assert {j["podGroupPhase"] for j in jobs} >= set(PHASES)
    assert {t["status"] for j in jobs for t in j["tasks"].values()} >= {"Pending", "Binding", "Bound", "Running"}


@pytest.mark.parametrize(
    "wrong",
    [
        lambda want: want["batch"]["allocated"].update(cpu=want["batch"]["allocated"].get("cpu", 0) + 1),
        lambda want: want["batch"]["pod_groups"].update(Pending=want["batch"]["pod_groups"]["Pending"] + 1),
        lambda want: want.pop("batch"),
        lambda want: want["prod"].update(weight=want["prod"]["weight"] + 1),
    ],
)
def test_a_wrong_expectation_is_reported(wrong):
    """The checker can fail: one changed figure in the oracle is one difference."""
    snapshot, expected = _case("c06")
    want = oracle(expected)
    wrong(want)
    assert differences(want, queue_figures(snapshot)) != []


def test_a_task_counted_in_the_wrong_sum_is_reported():
    """The oracle's own rule is checked too: counting Releasing tasks as allocated (a plausible
    mistake) disagrees with the figures on c06, which has Releasing tasks in shown jobs."""
    snapshot, expected = _case("c06")
    for job in expected["jobs"].values():
        for task in job["tasks"].values():
            if task["status"] == "Releasing":
                task["status"] = "Running"
    assert differences(oracle(expected), queue_figures(snapshot)) != []


def test_samples_do_not_depend_on_the_hash_seed():
    code = (
        "import sys; from pathlib import Path; from strata.projector.replay import replay_file;"
        "from strata.projector.fold.queuegauges import queue_figures, samples;"
        "print(samples(queue_figures(replay_file(Path(sys.argv[1]))[0].snapshot())))"
    )
    outputs = {
        subprocess.run(
            [sys.executable, "-c", code, str(CONFORMANCE / "c05.jsonl")],
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONHASHSEED": seed},
            check=True,
        ).stdout
        for seed in ("0", "4242")
    }
    assert len(outputs) == 1


# ---------------------------------------------------------------------------- the collector
def _scrape(collector: VolcanoCollector) -> str:
    registry = CollectorRegistry()
    registry.register(collector)
    return generate_latest(registry).decode()


def test_a_scrape_shows_volcanos_names_labels_and_values():
    snapshot = _snapshot(HANDCRAFTED)
    text = _scrape(VolcanoCollector(lambda: snapshot))
    scraped = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }
    want = {
        (s.family.name, tuple(sorted(zip(s.family.labels, s.labels, strict=True)))): s.value
        for s in samples(queue_figures(snapshot))
    }
    assert scraped == want
    assert 'volcano_queue_allocated_milli_cpu{queue_name="q1"} 2500.0\n' in text
    assert 'volcano_queue_request_scalar_resources{queue_name="q1",resource="nvidia.com/gpu"} 2000.0\n' in text
    assert 'volcano_queue_pod_group_running_count{queue_name="q1"} 1.0\n' in text
    assert "# HELP volcano_queue_pod_group_inqueue_count The number of Inqueue PodGroup in this queue\n" in text
    assert "# TYPE volcano_queue_allocated_memory_bytes gauge\n" in text


def test_every_family_is_exported_even_without_queues():
    text = _scrape(VolcanoCollector(lambda: _snapshot([])))
    names = [family.name for family in text_string_to_metric_families(text)]
    assert names == [family.name for family in queuegauges.FAMILIES]


def test_no_snapshot_yet_exports_nothing():
    assert _scrape(VolcanoCollector(lambda: None)) == ""


def test_a_second_collector_of_the_same_names_is_refused():
    registry = CollectorRegistry()
    registry.register(VolcanoCollector(lambda: None))
    with pytest.raises(ValueError, match="Duplicated timeseries"):
        registry.register(VolcanoCollector(lambda: None))


def test_an_unchanged_version_is_computed_once(monkeypatch: pytest.MonkeyPatch):
    calls: list[int] = []

    def counting(snapshot: Snapshot) -> tuple[QueueFigures, ...]:
        calls.append(snapshot.version)
        return queue_figures(snapshot)

    monkeypatch.setattr(queuemetrics, "queue_figures", counting)
    first = _snapshot(HANDCRAFTED)
    later = _snapshot([*HANDCRAFTED, _pod("p4", "pending", "Pending", LAUNCHER)])
    latest = [first]
    collector = VolcanoCollector(lambda: latest[0])
    scrapes = [_scrape(collector), _scrape(collector)]
    latest[0] = later
    scrapes.append(_scrape(collector))
    assert calls == [first.version, later.version]
    assert scrapes[0] == scrapes[1] != scrapes[2]
