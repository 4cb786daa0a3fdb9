"""The fold as a pure function: determinism, immutable snapshots, restore from serialized state."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from strata.projector.fold import statecodec
from strata.projector.fold.resources import BadQuantity, is_scalar_name, parse_quantity
from strata.projector.fold.state import CacheState, FoldConfig
from strata.projector.replay import fold_line, replay_bytes
from strata.schemas import Bind, BindFailed, Evict, EvictFailed, WatchEvent, objectjson
from strata.schemas.trace import split_lines
from tests.paths import CONFORMANCE

CONFORMANCE = CONFORMANCE
C06 = (CONFORMANCE / "c06.jsonl").read_bytes()


def _in_processes(code: str, trace: str, seeds: tuple[str, ...]) -> set[str]:
    """What ``code`` prints for ``trace`` in one fresh process per PYTHONHASHSEED."""
    return {
        subprocess.run(
            [sys.executable, "-c", code, str(CONFORMANCE / trace)],
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONHASHSEED": seed},
            check=True,
        ).stdout
        for seed in seeds
    }


def test_the_digest_does_not_depend_on_the_hash_seed():
    """Two processes with different string hashing compute the same bytes."""
    code = (
        "import sys; from pathlib import Path; from strata.projector.replay import replay_file;"
        "print(replay_file(Path(sys.argv[1]))[0].snapshot().digest())"
    )
    assert len(_in_processes(code, "c05.jsonl", ("0", "1", "12345"))) == 1


def test_a_snapshot_never_changes_after_later_records():
    lines = [line for _, line in split_lines(C06)]
    state = CacheState()
    taken = []
    for i, line in enumerate(lines):
        fold_line(state, line)
        if i % 500 == 0:
            snap = state.snapshot()
            taken.append((snap, json.dumps(snap.to_json(), sort_keys=True)))
    for snap, before in taken:
        snap._rendered.clear()  # render again from the shared maps, not from the cache
        assert json.dumps(snap.to_json(), sort_keys=True) == before
        assert snap.version == json.loads(before)["version"]


@pytest.mark.parametrize("cut", [0, 1, 57, 1000, 2500, 3999])
def test_restoring_serialized_state_continues_the_fold_exactly(cut: int):
    lines = [line for _, line in split_lines(C06)]
    want = replay_bytes(C06)[0].snapshot().digest()
    head, _ = replay_bytes(b"\n".join(lines[:cut]))
    blob = statecodec.encode(head)
    restored = statecodec.decode(blob)
    assert statecodec.encode(restored) == blob
    assert restored.snapshot().digest() == head.snapshot().digest()
    for line in lines[cut:]:
        fold_line(restored, line)
    assert restored.snapshot().digest() == want


def test_state_bytes_do_not_depend_on_the_hash_seed():
    code = (
        "import sys, hashlib; from pathlib import Path; from strata.projector.replay import replay_file;"
        "from strata.projector.fold.statecodec import encode;"
        "print(hashlib.sha256(encode(replay_file(Path(sys.argv[1]))[0])).hexdigest())"
    )
    assert len(_in_processes(code, "c04.jsonl", ("3", "4"))) == 1


def test_a_bad_state_blob_is_a_clear_error():
    with pytest.raises(statecodec.StateFormatError):
        statecodec.decode(b"not zstd")


def _event(op: str, obj: dict) -> WatchEvent:
    return WatchEvent(
        op=op,
        api_version=obj["apiVersion"],
        kind=obj["kind"],
        name=obj["metadata"]["name"],
        source="test",
        object=objectjson.dumps(obj),
    )


NODE = {
    "apiVersion": "v1",
    "kind": "Node",
    "metadata": {"name": "n1"},
    "status": {"allocatable": {"cpu": "2", "memory": "4Gi", "pods": "10"}},
}


def _pod(uid: str, cpu: str = "1", group: str | None = "pg", **spec: object) -> dict:
    meta = {"name": uid, "namespace": "ns", "uid": uid}
    if group:
        meta["annotations"] = {"scheduling.k8s.io/group-name": group}
    containers = [{"resources": {"requests": {"cpu": cpu}}}]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "status": {"phase": "Pending"},
        "spec": {"schedulerName": "volcano", "containers": containers, **spec},
    }


def test_bind_admission_and_reasons():
    state = CacheState()
    state.apply(_event("ADDED", NODE))
    for uid in ("a", "b", "c"):
        state.apply(_event("ADDED", _pod(uid)))
    state.apply(_event("ADDED", _pod("lone", group=None)))
    assert state.apply(Bind("a", "n1")).result == "applied"
    assert state.apply(Bind("a", "n1")).reason == "task is Binding, not Pending"
    assert state.apply(Bind("b", "n9")).reason == "node n9 is not stored"
    assert state.apply(Bind("lone", "n1")).reason == "no task of a job has this uid"
    assert state.apply(Bind("nobody", "n1")).reason == "no task of a job has this uid"
    assert state.apply(Bind("b", "n1")).result == "applied"
    assert state.apply(Bind("c", "n1")).reason == "cpu does not fit on node n1"  # 2 cores, 2 used
    assert state.apply(BindFailed("b")).result == "applied"
    assert state.apply(Bind("c", "n1")).result == "applied"
    snap = state.snapshot().to_json()
    assert snap["nodes"]["n1"]["used"] == {"cpu": 2000, "pods": 2}
    assert snap["nodes"]["n1"]["tasks"] == ["a", "c"]


def test_evict_and_its_failure_with_and_without_a_podgroup():
    state = CacheState()
    state.apply(_event("ADDED", NODE))
    state.apply(_event("ADDED", _pod("a")))
    state.apply(Bind("a", "n1"))
    assert state.apply(Evict("a")).reason == "the task's PodGroup is not stored"
    state.apply(
        _event(
            "ADDED",
            {
                "apiVersion": "scheduling.volcano.sh/v1beta1",
                "kind": "PodGroup",
                "metadata": {"name": "pg", "namespace": "ns"},
            },
        )
    )
    assert state.apply(Evict("a")).result == "applied"
    assert state.snapshot().to_json()["nodes"]["n1"]["releasing"] == {"cpu": 1000, "pods": 1}
    assert state.apply(BindFailed("a")).result == "ignored"  # Releasing, not Binding
    assert state.apply(EvictFailed("a")).result == "applied"
    task = state.tasks.get("a")
    assert (task.status, task.node) == ("Pending", "")  # back to what the pod says, not to Binding


def test_fold_configuration_changes_acceptance_and_default_queue():
    state = CacheState(FoldConfig(scheduler_names=("other",), default_queue="q"))
    state.apply(_event("ADDED", _pod("a")))
    assert state.tasks.get("a") is None
    state.apply(_event("ADDED", {**_pod("b"), "spec": {**_pod("b")["spec"], "schedulerName": "other"}}))
    assert state.tasks.get("b") is not None
    assert FoldConfig(("b", "a")).identity == FoldConfig(("a", "b", "a")).identity != FoldConfig(("a",)).identity


@pytest.mark.parametrize(
    ("text", "scale", "value"),
    [
        ("1e3", 1000, 1_000_000),
        ("1E3", 1, 1000),
        ("1E", 1, 10**18),
        ("2E-3", 1000, 2),
        ("0.1m", 1, 1),
        ("1Ki", 1000, 1_024_000),
        (" 1\n", 1, 1),
        ("1.", 1, 1),
        (".5", 1000, 500),
        ("+1", 1, 1),
        ("1.G", 1, 10**9),
        ("-0", 1, 0),
        ("0e999999999", 1, 0),
        ("1e-999999", 1, 1),
        ("7Ei", 1, 7 * 2**60),
        ("1.00000000000000000000000000001", 1000, 1001),
        ("9223372036854775807", 1, 2**63 - 1),
        ("1." + "0" * 6000 + "1", 1, 2),
    ],
)
def test_quantities(text, scale, value):
    assert parse_quantity(text, scale) == value


@pytest.mark.parametrize(
    "text",
    [
        "1E",
        "1e",
        "",
        "0x10",
        "1_000",
        "٣",
        "1K",
        "1ki",
        "-1",
        "-0.5m",
        "9223372036854775808",
        "8Ei",
        "1e999999",
        "1" + "0" * 6000,
        "true",
    ],
)
def test_bad_quantities(text):
    with pytest.raises(BadQuantity):
        parse_quantity(text, 1000 if text == "1E" else 1)


def test_scalar_names():
    for name in (
        "nvidia.com/gpu",
        "hugepages-2Mi",
        "attachable-volumes-csi-x",
        "example.com/a_b.c",
        "kubernetes.io/x/y",
    ):
        assert is_scalar_name(name), name
    for name in ("storage", "requests.cpu", "Example.COM/gpu", "a/b/c", "example.com/gpu\n", "example.com/", "x/-a"):
        assert not is_scalar_name(name), name


def test_memoized_resource_lists_keep_booleans_bad():
    """As dict keys True == 1: the memo must not turn a boolean quantity into a good one."""
    from strata.projector.fold.resources import parse_resources

    assert parse_resources({"cpu": 1}) == {"cpu": 1000}
    assert parse_resources({"cpu": "1"}) == {"cpu": 1000}
    for value in (True, False):
        with pytest.raises(BadQuantity):
            parse_resources({"cpu": value})
    with pytest.raises(BadQuantity):
        parse_resources({"storage": "lots"})
    with pytest.raises(BadQuantity):
        parse_resources({"storage": "lots"})  # a second time, from whatever the memo holds


def test_synced_kinds_are_kept_and_survive_a_checkpoint():
    state, _ = replay_bytes(b'{"type":"SYNCED","kind":"Pod"}\n{"type":"SYNCED","kind":"Node"}\n')
    assert state.synced == {"Pod", "Node"} and state.version == 2
    assert statecodec.decode(statecodec.encode(state)).synced == {"Pod", "Node"}


def test_a_follower_waits_for_every_kind_ingest_lists_in_its_order():
    from strata.kubeapi import RESOURCES
    from strata.projector.fold.kinds import KINDS
    from strata.projector.runner import ALL_KINDS

    assert tuple(RESOURCES) == ALL_KINDS
    assert {(r.api_version, r.kind) for r in RESOURCES.values()} == KINDS


def test_a_failure_that_names_its_bind_reverts_only_that_binds_overlay():
    state = CacheState()
    state.apply(_event("ADDED", NODE))
    pg = {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": "pg", "namespace": "ns"},
    }
    state.apply(_event("ADDED", pg))  # an EVICT needs the task's PodGroup
    state.apply(_event("ADDED", _pod("a")))
    first = state.version  # the offset the next record takes
    assert state.apply(Bind("a", "n1")).result == "applied"
    assert state.apply(BindFailed("a", "gone", bind_offset=first)).result == "applied"
    again = state.version
    assert state.apply(Bind("a", "n1")).result == "applied"
    # the binder wrote its first failure twice (a crash before it committed): no effect now
    late = state.apply(BindFailed("a", "gone", bind_offset=first))
    assert late.result == "ignored" and f"offset {again}" in late.reason
    assert state.tasks["a"].status == "Binding"
    evicted = state.version
    assert state.apply(Evict("a")).result == "applied"
    assert state.apply(EvictFailed("a", evict_offset=evicted - 1)).result == "ignored"
    assert state.apply(EvictFailed("a", evict_offset=evicted)).result == "applied"
    # a failure without an offset (the trace format's) follows the spec: any overlay of its kind
    assert state.apply(Bind("a", "n1")).result == "applied"
    assert state.apply(BindFailed("a")).result == "applied"
    restored = statecodec.decode(statecodec.encode(state))
    assert restored.overlays == state.overlays


def test_dumped_offsets_replay_like_the_log():
    lines = [
        json.dumps({"type": "ADDED", "object": NODE}),
        json.dumps({"type": "ADDED", "object": _pod("a")}),
        '{"type":"BIND","pod":"a","node":"n1"}',
        '{"type":"BIND_FAILED","pod":"a","bind_offset":2}',
        '{"type":"BIND","pod":"a","node":"n1"}',
        '{"type":"BIND_FAILED","pod":"a","bind_offset":2}',
    ]
    state, _ = replay_bytes("\n".join(lines).encode())
    assert state.tasks["a"].status == "Binding"


def test_hypernode_regex_of_the_common_subset_runs_in_linear_time():
    """The spec's constructs run on RE2: a pattern that makes a backtracking engine take 2^40 steps
    on a 43-character name is answered at once. Constructs outside the subset keep Python's meaning,
    as the conformance trace edge-12 expects (a lookahead selects nodes)."""
    from strata.projector.fold.hypernodes import hypernode_entries
    from strata.projector.fold.kinds import HyperNodeView, Member

    long = "a" * 40 + "-x"
    nodes = {long: {}, "aaa": {}, "n1": {}, "n{,1}": {}}

    def selected(pattern: str) -> list[str]:
        hypernodes = {"h": HyperNodeView("h", 1, "", (Member("Node", None, pattern, None),))}
        return hypernode_entries(hypernodes, nodes)["h"].nodes

    assert selected("(a+)+$") == ["aaa"]
    assert selected("^n[0-9]{1,3}$|x$") == [long, "n1"]
    assert selected("a(?=a)") == ["aaa", long]
    assert selected("(a)\\1") == ["aaa", long]
    assert selected("^n{,1}$") == []  # to Python, "n" 0 or 1 times; to RE2 the literal "n{,1}"
    assert selected("a[") == []  # does not compile: contributes nothing
    assert selected("([^b]+)+$") == ["aaa", long, "n1", "n{,1}"]  # a negated character: RE2 too
    assert selected("x{1001}|(a+)+$") == []  # refused by RE2, as by Go: contributes nothing
    assert selected("^n{01}1$") == ["n1"]  # to Python "n" once, to RE2 the literal "n{01}"


def test_hypernode_regex_keeps_pythons_dollar_before_a_final_newline():
    from strata.projector.fold.hypernodes import hypernode_entries
    from strata.projector.fold.kinds import HyperNodeView, Member

    hypernodes = {"h": HyperNodeView("h", 1, "", (Member("Node", None, "^n1$", None),))}
    assert hypernode_entries(hypernodes, {"n1\n": {}, "n1": {}, "n12": {}})["h"].nodes == ["n1", "n1\n"]
