"""The synthetic history generator (strata/dev/gen.py): deterministic, valid, and consistent with the fold."""

from __future__ import annotations

import io
import json
from collections import Counter
from dataclasses import asdict

import pytest

from strata.dev import gen
from strata.dev.gen import GenStats, generate
from strata.projector.replay import replay_bytes
from strata.schemas.trace import SCHEDULER_RECORDS, WATCH_OPS

SMALL = {"nodes": 50, "pods": 1500}
LIVE = ("Pending", "Binding", "Bound", "Running", "Releasing")


def run(**kwargs: object) -> tuple[bytes, GenStats]:
    out = io.BytesIO()
    stats = generate(out, **kwargs)  # type: ignore[arg-type]
    return out.getvalue(), stats


@pytest.fixture(scope="module")
def small():
    data, stats = run(**SMALL)
    state, report = replay_bytes(data)
    lines = data.split(b"\n")
    assert lines[-1] == b""  # every record ends with LF
    records = [json.loads(line) for line in lines[:-1]]
    return data, stats, records, state, report


# ------------------------------------------------------------------------------- determinism
def test_same_arguments_give_identical_bytes():
    first, stats1 = run(nodes=30, pods=600, seed=7)
    second, stats2 = run(nodes=30, pods=600, seed=7)
    assert first == second
    assert asdict(stats1) == asdict(stats2)


def test_another_seed_gives_another_history():
    first, _ = run(nodes=30, pods=600, seed=7)
    second, _ = run(nodes=30, pods=600, seed=8)
    assert first != second


# ------------------------------------------------------------------------------------ format
def test_every_line_is_a_compact_valid_record(small):
    data, stats, records, _, report = small
    assert report.bad == []
    assert report.records == len(records) == stats.records
    assert len(data) == stats.bytes
    assert b"\r" not in data
    for line, record in zip(data.split(b"\n"), records, strict=False):
        assert line == json.dumps(record, separators=(",", ":")).encode()  # compact, one object per line
        assert record["type"] in WATCH_OPS or record["type"] in SCHEDULER_RECORDS


def test_stats_count_what_was_written(small):
    _, stats, records, _, _ = small
    assert stats.by_type == dict(Counter(r["type"] for r in records))
    assert stats.by_kind == dict(Counter(r["object"]["kind"] for r in records if "object" in r))
    assert stats.binds == stats.by_type["BIND"] == stats.binds_admitted + stats.binds_rejected
    assert stats.evictions == stats.by_type["EVICT"]
    assert stats.bind_failures == stats.by_type["BIND_FAILED"]


def test_all_record_types_and_kinds_occur(small):
    _, _, records, _, _ = small
    types = Counter(r["type"] for r in records)
    for rtype in (*WATCH_OPS, *SCHEDULER_RECORDS):
        assert types[rtype] > 0, rtype
    events = Counter((r["type"], r["object"]["kind"]) for r in records if "object" in r)
    for kind in ("Node", "Pod", "PodGroup", "Queue", "PriorityClass", "CSINode", "HyperNode"):
        assert events["ADDED", kind] > 0, kind
    for event in [("MODIFIED", "Pod"), ("DELETED", "Pod"), ("MODIFIED", "PodGroup"), ("DELETED", "PodGroup"),
                  ("MODIFIED", "Queue"), ("DELETED", "Node"), ("MODIFIED", "Node")]:  # fmt: skip
        assert events[event] > 0, event
    synced = {r["kind"] for r in records if r["type"] == "SYNCED"}
    assert synced == {"Node", "Pod", "PodGroup", "Queue", "PriorityClass", "CSINode", "HyperNode"}


def test_objects_look_like_a_cluster(small):
    _, _, records, _, _ = small
    objects = [(r["type"], r["object"]) for r in records if "object" in r]
    nodes = [o for t, o in objects if o["kind"] == "Node"]
    assert all(o["apiVersion"] == "v1" and "Ready" in {c["type"] for c in o["status"]["conditions"]} for o in nodes)
    assert any(o["spec"].get("taints") for o in nodes)
    assert any("volcano.sh/revocable-zone" in o["metadata"]["labels"] for o in nodes)
    assert any("nvidia.com/gpu" in o["status"]["allocatable"] for o in nodes)
    assert all("topology.kubernetes.io/rack" in o["metadata"]["labels"] for o in nodes)

    pods = [o for t, o in objects if o["kind"] == "Pod"]
    added = [o for t, o in objects if t == "ADDED" and o["kind"] == "Pod"]
    assert all(o["status"]["phase"] == "Pending" and "nodeName" not in o["spec"] for o in added)
    assert all(o["spec"]["schedulerName"] == "volcano" for o in added)
    assert all(o["metadata"]["annotations"]["scheduling.k8s.io/group-name"] for o in added)
    assert {o["status"]["phase"] for o in pods} >= {"Pending", "Running", "Succeeded", "Failed"}
    assert any(o["metadata"].get("deletionTimestamp") for o in pods)
    assert any("initContainers" in o["spec"] for o in added)
    assert any("nvidia.com/gpu" in c["resources"]["requests"] for o in added for c in o["spec"]["containers"])
    mean = sum(len(json.dumps(o, separators=(",", ":"))) for o in added) / len(added)
    assert 600 <= mean <= 1300  # realistic sizes

    pgs = [o for t, o in objects if t == "ADDED" and o["kind"] == "PodGroup"]
    assert all(o["spec"]["minMember"] >= 1 and o["spec"]["queue"] for o in pgs)
    hypernodes = [o for t, o in objects if o["kind"] == "HyperNode"]
    selectors = {k for o in hypernodes for m in o["spec"]["members"] for k in m["selector"]}
    assert selectors == {"exactMatch", "regexMatch", "labelMatch"}
    classes = [o for t, o in objects if o["kind"] == "PriorityClass"]
    assert sum(o["globalDefault"] for o in classes) == 1


def test_resource_versions_change_on_every_update(small):
    """The fold ignores a PodGroup or Queue update that repeats the stored resourceVersion."""
    _, _, records, _, _ = small
    stored: dict[tuple[str, str, str], str] = {}
    for r in records:
        if "object" not in r or r["object"]["kind"] not in ("PodGroup", "Queue"):
            continue
        meta = r["object"]["metadata"]
        key = (r["object"]["kind"], meta.get("namespace", ""), meta["name"])
        if r["type"] == "DELETED":
            stored.pop(key, None)
            continue
        assert stored.get(key) != meta["resourceVersion"], key
        stored[key] = meta["resourceVersion"]


# ------------------------------------------------------------------------------ the fold's view
def test_replay_ends_with_the_requested_live_pods(small):
    _, stats, _, state, _ = small
    snapshot = state.snapshot().to_json()
    statuses = Counter(t["status"] for job in snapshot["jobs"].values() for t in job["tasks"].values())
    assert sum(statuses.values()) == len(state.tasks) == stats.live_pods
    assert set(statuses) <= set(LIVE)
    assert {k: v for k, v in stats.live_by_status.items() if v} == dict(statuses)
    assert abs(stats.live_pods - SMALL["pods"]) <= SMALL["pods"] * 0.02
    assert statuses["Running"] > 0.9 * stats.live_pods
    assert len(snapshot["nodes"]) == stats.nodes == SMALL["nodes"]
    assert len(snapshot["queues"]) == stats.queues == 20
    assert len(snapshot["jobs"]) == stats.jobs_live
    spread = [len(n["tasks"]) for n in snapshot["nodes"].values()]
    assert sum(1 for n in spread if n) >= 0.9 * SMALL["nodes"]


def test_binds_are_admitted_except_the_planned_races(small):
    _, stats, records, _, report = small
    assert len(report.rejected) == stats.binds_rejected
    assert stats.binds_rejected <= 0.05 * stats.binds
    assert all(records[number - 1]["type"] == "BIND" for number, _ in report.rejected)
    assert any("not Pending" in reason for _, reason in report.rejected)


def test_node_usage_never_exceeds_allocatable(small):
    _, _, _, state, _ = small
    snapshot = state.snapshot().to_json()
    for name, node in snapshot["nodes"].items():
        for key in ("cpu", "memory", "pods", "nvidia.com/gpu"):
            assert node["used"].get(key, 0) <= node["allocatable"].get(key, 0), (name, key)


def test_tracked_idle_resources_equal_the_folds():
    """The generator binds by its own bookkeeping of each node's idle resources: it must be the fold's."""
    out = io.BytesIO()
    generator = gen._Generator(out, nodes=40, pods=1200, queues=5, churn=1.5, seed=3, replicas=2)
    generator.run()
    state, report = replay_bytes(out.getvalue())
    assert report.bad == []
    snapshot = state.snapshot().to_json()
    for node in generator.all_nodes:
        idle = snapshot["nodes"][node.name]["idle"]
        tracked = {"cpu": node.cpu, "memory": node.mem, "pods": node.pods, "nvidia.com/gpu": node.gpu}
        assert {k: idle.get(k, 0) for k in tracked} == tracked, node.name


def test_topology_and_priorities_reach_the_snapshot(small):
    _, _, _, state, _ = small
    snapshot = state.snapshot().to_json()
    assert set(snapshot["hyperNodesByTier"]) == {"1", "2", "3"}
    assert all(h["nodes"] for h in snapshot["hyperNodes"].values())
    assert snapshot["csiNodes"]
    assert snapshot["revocableNodes"]
    assert snapshot["defaultPriority"] == 1000


# ------------------------------------------------------------------------------------- shape
def test_churn_scales_the_pods_that_come_and_go():
    _, calm = run(nodes=20, pods=400, churn=0.0)
    _, busy = run(nodes=20, pods=400, churn=2.0)
    assert calm.live_pods == busy.live_pods == 400
    assert calm.pods_created - calm.pods_deleted == busy.pods_created - busy.pods_deleted == 400
    assert calm.pods_deleted <= 0.05 * 400  # evictions only
    assert 2.0 * 400 <= busy.pods_deleted <= 2.2 * 400


def test_output_streams_in_chunks():
    class Sink:
        def __init__(self) -> None:
            self.writes = 0
            self.size = 0

        def write(self, data: bytes) -> int:
            self.writes += 1
            self.size += len(data)
            return len(data)

    sink = Sink()
    stats = generate(sink, **SMALL)  # type: ignore[arg-type]
    assert sink.writes > 1
    assert sink.size == stats.bytes


@pytest.mark.parametrize("nodes", [1, 3, 25])
def test_tiny_clusters_replay_cleanly(nodes):
    data, stats = run(nodes=nodes, pods=150, queues=3, replicas=1, seed=nodes)
    state, report = replay_bytes(data)
    assert report.bad == []
    assert len(report.rejected) == stats.binds_rejected
    assert len(state.tasks) == stats.live_pods == 150


@pytest.mark.parametrize(
    "kwargs",
    [{"nodes": 0}, {"pods": -1}, {"queues": 0}, {"churn": -0.5}, {"churn": float("nan")}, {"replicas": 0}],
)
def test_bad_arguments(kwargs):
    with pytest.raises(ValueError):
        generate(io.BytesIO(), **kwargs)
