"""`strata why`: the pure explanation on traces made by hand, its agreement with the fold's own
BIND verdicts, and the command on the real broker (now, in the past, and on the sample history
that `strata demo` publishes)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from strata.log.config import Settings
from strata.projector.fold.explain import (
    CORDON_TAINT,
    BindAttempt,
    Explanation,
    Toleration,
    any_fit,
    node_fit,
    tolerations_of,
    why_job,
    why_pod,
)
from strata.projector.fold.kinds import Taint
from strata.projector.fold.snapshot import Snapshot
from strata.projector.fold.state import CacheState
from strata.projector.replay import fold_line
from tests.cli.test_cli import run
from tests.cli.test_log import env_of
from tests.paths import SAMPLE

SAMPLE = SAMPLE
NS = "team"


# ------------------------------------------------------------------------------ trace records
def node(name: str, cpu: str = "8", memory: str = "16Gi", pods: str = "110", **spec: Any) -> dict[str, Any]:
    resources = {"cpu": cpu, "memory": memory, "pods": pods}
    return _watch(
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name},
            "spec": spec,
            "status": {"allocatable": resources, "capacity": resources},
        }
    )


def queue(name: str = "default", state: str | None = "Open") -> dict[str, Any]:
    status = {"state": state} if state is not None else {}
    return _watch(
        {
            "apiVersion": "scheduling.volcano.sh/v1beta1",
            "kind": "Queue",
            "metadata": {"name": name},
            "spec": {"weight": 1},
            "status": status,
        }
    )


def podgroup(name: str, min_member: int, queue_name: str = "default") -> dict[str, Any]:
    return _watch(
        {
            "apiVersion": "scheduling.volcano.sh/v1beta1",
            "kind": "PodGroup",
            "metadata": {"name": name, "namespace": NS, "resourceVersion": "1"},
            "spec": {"minMember": min_member, "queue": queue_name},
            "status": {"phase": "Pending"},
        }
    )


def pod(
    name: str,
    cpu: str = "1",
    memory: str = "1Gi",
    group: str | None = "job",
    node_name: str | None = None,
    phase: str = "Pending",
    tolerations: list[dict[str, str]] | None = None,
    **requests: str,
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "schedulerName": "volcano",
        "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu, "memory": memory, **requests}}}],
    }
    if node_name:
        spec["nodeName"] = node_name
    if tolerations is not None:
        spec["tolerations"] = tolerations
    annotations = {"scheduling.k8s.io/group-name": group} if group else {}
    return _watch(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": NS, "uid": f"uid-{name}", "annotations": annotations},
            "spec": spec,
            "status": {"phase": phase},
        }
    )


def bind(name: str, node_name: str, replica: str = "r1") -> dict[str, Any]:
    return {"type": "BIND", "pod": f"uid-{name}", "node": node_name, "replica": replica}


def _watch(obj: dict[str, Any], op: str = "ADDED") -> dict[str, Any]:
    return {"type": op, "object": obj}


def fold(*records: dict[str, Any]) -> CacheState:
    state = CacheState()
    for r in records:
        outcome = fold_line(state, json.dumps(r).encode())
        assert outcome.result != "bad", (r, outcome)
    return state


def snapshot_of(*records: dict[str, Any]) -> Snapshot:
    return fold(*records).snapshot()


def trace_file(path: Path, records: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


# ----------------------------------------------------------------------------------- checkers
def expect(answer: Explanation | dict[str, Any], reason: str, message: str) -> None:
    """The answer's first reason: its code and its exact words."""
    got = answer.to_json() if isinstance(answer, Explanation) else answer
    assert (got["reason"], got["message"]) == (reason, message), (got["reason"], got["message"])


# ---------------------------------------------------------------------------------- the nodes
CROWD = [
    queue(),
    podgroup("job", 1),
    node("small-cpu-1", cpu="2"),
    node("small-cpu-2", cpu="2"),
    node("small-memory", memory="1Gi"),
    node("small-both", cpu="1", memory="1Gi"),
    node("cordoned", unschedulable=True),
    pod("p", cpu="4", memory="8Gi"),
]
CROWD_SENTENCE = "0/5 nodes are available: 1 node(s) were unschedulable, 2 Insufficient memory, 3 Insufficient cpu."


def test_resources_and_cordons_are_counted_as_kube_scheduler_counts_them():
    answer = why_pod(snapshot_of(*CROWD), NS, "p", [])
    expect(answer, "Unschedulable", CROWD_SENTENCE)
    nodes = answer.to_json()["nodes"]
    assert (nodes["total"], nodes["fit"], nodes["fitting"]) == (5, 0, [])
    assert [(r["code"], r.get("resource"), r["count"]) for r in nodes["reasons"]] == [
        ("NodeUnschedulable", None, 1),
        ("InsufficientResource", "memory", 2),  # small-both counts for cpu and for memory
        ("InsufficientResource", "cpu", 3),
    ]
    assert CROWD_SENTENCE in answer.lines()[1]
    assert "nodes: 0 of 5 fit the request (cpu=4 memory=8Gi pods=1)" in answer.lines()


def test_the_sentence_checker_fails_on_a_wrong_count():
    """The negative control: the same answer against a sentence one node off is refused."""
    answer = why_pod(snapshot_of(*CROWD), NS, "p", [])
    with pytest.raises(AssertionError):
        expect(answer, "Unschedulable", CROWD_SENTENCE.replace("3 Insufficient cpu", "4 Insufficient cpu"))
    with pytest.raises(AssertionError):
        expect(answer, "InsufficientResource", CROWD_SENTENCE)


def test_the_histogram_sorts_as_go_sorts_strings_and_counts_what_fits():
    nodes = [node(f"big-{i}") for i in range(12)] + [node(f"tiny-{i}", cpu="1") for i in range(3)]
    answer = why_pod(snapshot_of(queue(), podgroup("job", 1), *nodes, pod("p", cpu="2")), NS, "p", [])
    expect(
        answer,
        "Pending",
        "12/15 nodes fit the task; no scheduler replica has bound it yet; "
        "its gang needs 1 more bound task(s) to reach minMember 1",
    )
    fit = answer.to_json()["nodes"]
    assert fit["message"] == "12/15 nodes are available: 3 Insufficient cpu."
    assert fit["fitting"] == sorted(f"big-{i}" for i in range(12))[:10]  # a sample, sorted; the count is whole
    # "10 Insufficient cpu" sorts before "2 Insufficient memory", as Go's sort.Strings puts it
    crowd = [node(f"a-{i}", cpu="1") for i in range(10)] + [node(f"b-{i}", memory="1") for i in range(2)]
    fit = why_pod(snapshot_of(queue(), podgroup("job", 1), *crowd, pod("p", cpu="2")), NS, "p", []).to_json()
    assert fit["message"] == "0/12 nodes are available: 10 Insufficient cpu, 2 Insufficient memory."


def test_a_full_node_says_too_many_pods_and_a_missing_scalar_is_insufficient():
    records = [queue(), podgroup("job", 1), node("full", pods="1"), node("no-gpu"), node("gpu")]
    records[-1]["object"]["status"]["allocatable"]["nvidia.com/gpu"] = "1"
    records += [pod("running", node_name="full", phase="Running", group=None)]
    records += [pod("p", **{"nvidia.com/gpu": "1"})]
    answer = why_pod(snapshot_of(*records), NS, "p", [])
    assert answer.to_json()["nodes"]["message"] == (
        # the full node has no gpu either: kube-scheduler's fit filter names every resource short
        "1/3 nodes are available: 1 Too many pods, 2 Insufficient nvidia.com/gpu."
    )
    assert {r["code"] for r in answer.to_json()["nodes"]["reasons"]} == {"InsufficientResource", "TooManyPods"}


TAINTED = [
    queue(),
    podgroup("job", 1),
    node("infra", taints=[{"key": "dedicated", "value": "infra", "effect": "NoSchedule"}]),
    node("gpu", taints=[{"key": "nvidia.com/gpu", "value": "present", "effect": "NoExecute"}]),
    node("soft", taints=[{"key": "spot", "value": "true", "effect": "PreferNoSchedule"}]),  # only scores
]


@pytest.mark.parametrize(
    ("tolerations", "sentence"),
    [
        (
            None,
            "1/3 nodes are available: 1 node(s) had untolerated taint {dedicated: infra}, "
            "1 node(s) had untolerated taint {nvidia.com/gpu: present}.",
        ),
        (
            [{"key": "dedicated", "operator": "Exists"}],
            "2/3 nodes are available: 1 node(s) had untolerated taint {nvidia.com/gpu: present}.",
        ),
        (
            [{"key": "dedicated", "operator": "Equal", "value": "infra", "effect": "NoSchedule"}],
            "2/3 nodes are available: 1 node(s) had untolerated taint {nvidia.com/gpu: present}.",
        ),
        (
            [{"key": "dedicated", "value": "other"}],  # no operator is Equal: the value must match
            "1/3 nodes are available: 1 node(s) had untolerated taint {dedicated: infra}, "
            "1 node(s) had untolerated taint {nvidia.com/gpu: present}.",
        ),
        (
            [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],  # the taint is NoExecute
            "1/3 nodes are available: 1 node(s) had untolerated taint {dedicated: infra}, "
            "1 node(s) had untolerated taint {nvidia.com/gpu: present}.",
        ),
        ([{"operator": "Exists"}], "3/3 nodes are available."),  # an empty key with Exists tolerates all
    ],
)
def test_noschedule_and_noexecute_taints_count_unless_tolerated(tolerations, sentence):
    snapshot = snapshot_of(*TAINTED, pod("p", tolerations=tolerations))
    known = None if tolerations is None else tolerations_of({"spec": {"tolerations": tolerations}})
    fit = why_pod(snapshot, NS, "p", [], tolerations=known).to_json()["nodes"]
    assert fit["message"] == sentence
    taints = [r["taint"] for r in fit["reasons"]]
    assert all(r["code"] == "UntoleratedTaint" for r in fit["reasons"])
    assert {"key": "dedicated", "value": "infra", "effect": "NoSchedule"} in taints or "dedicated" not in sentence


@pytest.mark.parametrize(
    ("toleration", "taint", "tolerated"),
    [
        (Toleration("k", "Equal", "v", "NoSchedule"), Taint("k", "v", "NoSchedule"), True),
        (Toleration("k", "", "v", ""), Taint("k", "v", "NoExecute"), True),  # empty effect: every effect
        (Toleration("k", "Equal", "w", ""), Taint("k", "v", "NoSchedule"), False),
        (Toleration("k", "Exists", "", "NoExecute"), Taint("k", "v", "NoSchedule"), False),
        (Toleration("", "Exists", "", ""), Taint("any", "thing", "NoExecute"), True),
        (Toleration("", "Exists", "", "NoSchedule"), Taint("any", "thing", "NoExecute"), False),
        (Toleration("other", "Exists", "", ""), Taint("k", "", "NoSchedule"), False),
        (Toleration("k", "Gt", "1", ""), Taint("k", "2", "NoSchedule"), False),  # alpha operators: off
    ],
)
def test_toleration_rules_are_kubernetes_own(toleration, taint, tolerated):
    assert toleration.tolerates(taint) is tolerated


def test_a_pod_that_tolerates_the_cordon_taint_passes_a_cordoned_node():
    records = [queue(), podgroup("job", 1), node("cordoned", cpu="1", unschedulable=True)]
    snapshot = snapshot_of(*records, pod("p", cpu="2"))
    cordon = [Toleration(CORDON_TAINT.key, "Exists", "", "NoSchedule")]
    assert node_fit(snapshot, {"cpu": 2000}, []).message == "0/1 nodes are available: 1 node(s) were unschedulable."
    # past the cordon, the next filter speaks
    assert node_fit(snapshot, {"cpu": 2000}, cordon).message == "0/1 nodes are available: 1 Insufficient cpu."


def test_tolerations_of_reads_the_pod_spec_and_skips_what_is_not_a_toleration():
    obj = {"spec": {"tolerations": [{"key": "a", "operator": "Exists"}, "junk", {"key": 3, "effect": "NoSchedule"}]}}
    assert tolerations_of(obj) == (Toleration("a", "Exists", "", ""), Toleration("", "", "", "NoSchedule"))
    assert tolerations_of({"spec": {"tolerations": "x"}}) == () == tolerations_of(None)


def test_node_fit_agrees_with_the_fold_on_every_node():
    """Fit by resources (nodes without taints or cordons) is what the fold admits: a BIND of the
    pod to each node, folded, is admitted exactly where `why` says the node fits."""
    nodes = [
        node("roomy"),
        node("exact", cpu="3", memory="2Gi"),  # the request fits to the unit
        node("one-short", cpu="2999m"),
        node("no-memory", memory="0"),
        node("full", pods="1"),
        node("overcommitted", cpu="1"),  # a running pod takes more than it has: idle < 0
        node("gpu"),
    ]
    nodes[-1]["object"]["status"]["allocatable"]["example.com/gpu"] = "2"
    base = [queue(), podgroup("job", 1), *nodes]
    base += [pod("hog", cpu="2", node_name="overcommitted", phase="Running", group=None)]
    base += [pod("sitter", cpu="0", memory="0", node_name="full", phase="Running", group=None)]
    seen = set()
    for extra in ({}, {"example.com/gpu": "1"}, {"example.com/gpu": "0"}, {"example.com/gpu": "3"}):
        records = [*base, pod("p", cpu="3", memory="2Gi", **extra)]
        snapshot = snapshot_of(*records)
        task = snapshot.tasks["uid-p"]
        fit = node_fit(snapshot, task.resreq, [])
        fits_per_why = set(fit.fitting)
        assert fit.fit == len(fits_per_why)  # fewer than FITTING_SHOWN here: the names are all there
        admitted = set()
        for n in sorted(snapshot.nodes.keys()):
            state = fold(*records)
            if state.bind("uid-p", n).result == "applied":
                admitted.add(n)
        assert fits_per_why == admitted, extra
        assert any_fit(snapshot, task.resreq, []) is bool(admitted)
        assert admitted != set(sorted(snapshot.nodes.keys()))  # no node fits everything
        seen.add(bool(admitted))
    assert seen == {True, False}  # neither side is vacuous


# ------------------------------------------------------------------------ gang, queue, binds
GANG = [queue(), node("n1"), node("n2", cpu="1")]
GANG += [pod("a", node_name="n1", phase="Running"), pod("b"), pod("c", cpu="2"), pod("d", cpu="7"), bind("b", "n1")]


def test_gang_counts_in_volcano_words():
    """a runs and b is Binding on n1 (6 cpu left), c fits there, d fits nowhere: with minMember 4
    the gang cannot complete, and even c, which fits, waits for it."""
    snapshot = snapshot_of(podgroup("job", 4), *GANG)
    gang = "2/4 tasks in gang unschedulable: pod group is not ready, 1 Binding, 1 Running, 2 Pending, 4 minAvailable"
    fits = why_pod(snapshot, NS, "c", [])
    expect(fits, "GangUnschedulable", gang)
    assert fits.to_json()["nodes"]["message"] == "1/2 nodes are available: 1 Insufficient cpu."
    g = fits.to_json()["gang"]
    assert (g["minMember"], g["tasks"], g["ready"], g["allocated"], g["pending"], g["satisfied"]) == (
        4,
        4,
        2,
        2,
        2,
        False,
    )
    assert g["statuses"] == {"Binding": 1, "Pending": 2, "Running": 1}
    stuck = why_pod(snapshot, NS, "d", [])
    assert [(r["code"], r["message"]) for r in stuck.to_json()["reasons"]] == [
        ("Unschedulable", "0/2 nodes are available: 2 Insufficient cpu."),
        ("GangUnschedulable", gang),
    ]
    job = why_job(snapshot, NS, "job", {})
    assert [r["code"] for r in job.to_json()["reasons"]] == ["Unschedulable", "GangUnschedulable"]
    expect(job, "Unschedulable", "1/2 pending task(s) fit no node; d: 0/2 nodes are available: 2 Insufficient cpu.")
    assert [(t["name"], t["status"], t["reason"]) for t in job.to_json()["tasks"]] == [
        ("a", "Running", "Running"),
        ("b", "Binding", "Binding"),
        ("c", "Pending", "GangUnschedulable"),
        ("d", "Pending", "Unschedulable"),
    ]
    assert [(n["tasks"], n["message"]) for n in job.to_json()["nodes"]] == [
        (["c"], "1/2 nodes are available: 1 Insufficient cpu."),
        (["d"], "0/2 nodes are available: 2 Insufficient cpu."),
    ]


def test_a_gang_that_can_still_complete_waits_for_the_scheduler():
    snapshot = snapshot_of(podgroup("job", 3), *GANG)  # a, b and c make three
    expect(
        why_pod(snapshot, NS, "c", []),
        "Pending",
        "1/2 nodes fit the task; no scheduler replica has bound it yet; "
        "its gang needs 1 more bound task(s) to reach minMember 3",
    )
    assert [r.code for r in why_job(snapshot, NS, "job", {}).reasons] == ["Unschedulable"]  # d, not the gang
    bound = why_job(snapshot_of(podgroup("job", 3), *GANG, bind("c", "n1")), NS, "job", {})
    assert bound.to_json()["gang"]["message"] == (
        "tasks in gang are ready to be scheduled: pod group is ready, 1 Pending, 1 Running, 2 Binding, 3 minAvailable"
    )


def test_tasks_of_one_template_share_one_node_check():
    records = [queue(), podgroup("job", 2), node("n1", cpu="3"), node("n2", cpu="1")]
    workers = [pod(f"w-{i:02}", cpu="1500m") for i in range(12)]
    job = why_job(snapshot_of(*records, *workers), NS, "job", {})
    expect(
        job,
        "Pending",
        "12 pending task(s) fit a node; no scheduler replica has bound them yet; "
        "its gang needs 2 more bound task(s) to reach minMember 2",
    )
    assert [(len(n["tasks"]), n["message"]) for n in job.to_json()["nodes"]] == [
        (12, "1/2 nodes are available: 1 Insufficient cpu.")
    ]
    assert "pending w-00, w-01, w-02, w-03, w-04, w-05, w-06, w-07, w-08, w-09 and 2 more:" in job.lines()
    assert "  nodes: 1 of 2 fit the request (cpu=1500m memory=1Gi pods=1)" in job.lines()


def test_hints_from_the_index_spare_the_pass_over_all_tasks_and_change_nothing():
    snapshot = snapshot_of(podgroup("job", 4), *GANG)
    plain = why_pod(snapshot, NS, "c", []).to_json()
    superset = ["uid-a", "uid-b", "uid-d", "uid-deleted-long-ago"]
    assert why_pod(snapshot, NS, "c", [], uid="uid-c", job_uids=superset).to_json() == plain
    assert why_pod(snapshot, NS, "c", [], uid="uid-d").to_json() == plain  # another pod's uid: ignored
    job = why_job(snapshot, NS, "job", {}).to_json()
    assert why_job(snapshot, NS, "job", {}, job_uids=[*superset, "uid-c"]).to_json() == job
    # the hint is trusted to be a superset: one that misses a task gives another answer
    assert why_job(snapshot, NS, "job", {}, job_uids=["uid-a"]).to_json() != job


@pytest.mark.parametrize(
    ("records", "reason", "message"),
    [
        (
            [queue(state="Closed"), podgroup("job", 1)],
            "QueueClosed",
            "queue default is Closed: Volcano allocates only from an Open queue",
        ),
        (
            [queue(state=None), podgroup("job", 1)],
            "QueueNotOpen",
            "queue default has no state: Volcano allocates only from an Open queue",
        ),
        ([queue("other"), podgroup("job", 1)], "QueueNotFound", "queue default of job team/job is not in the cache"),
        ([queue()], "PodGroupNotFound", "PodGroup team/job is not in the cache"),
    ],
)
def test_what_blocks_a_whole_job_comes_first(records, reason, message):
    snapshot = snapshot_of(*records, node("tiny", cpu="1"), pod("p", cpu="2"))
    answer = why_pod(snapshot, NS, "p", [])
    expect(answer, reason, message)
    assert [r["code"] for r in answer.to_json()["reasons"]][1] == "Unschedulable"  # the nodes are told too
    expect(why_job(snapshot, NS, "job", {}), reason, message)


def test_a_pod_of_no_job_can_never_be_bound():
    answer = why_pod(snapshot_of(queue(), node("n"), pod("loner", group=None)), NS, "loner", [])
    assert answer.reason.code == "NotInJob" and "group-name annotation" in answer.reason.message
    assert answer.gang is None and answer.queue is None


def test_bind_attempts_are_listed_in_log_order_with_their_verdicts():
    records = [queue(), podgroup("job", 1), node("n1"), pod("p")]
    snapshot = snapshot_of(*records, bind("p", "n1"))
    attempts = [
        BindAttempt(7, "n1", "r2", "admitted", None),
        BindAttempt(5, "n0", "r1", "rejected", "node n0 is not stored"),
    ]
    answer = why_pod(snapshot, NS, "p", attempts)
    expect(answer, "Binding", "a BIND to node n1 was admitted at offset 7; the binder has not bound the pod yet")
    assert [b["offset"] for b in answer.to_json()["binds"]] == [5, 7]
    lines = answer.lines()
    assert "  offset 5: BIND to n0 by r1: rejected: node n0 is not stored" in lines
    assert "  offset 7: BIND to n1 by r2: admitted" in lines
    assert lines[0] == "pod team/p at version 5: Binding on n1"


def test_not_found_and_a_placed_pod():
    snapshot = snapshot_of(queue(), podgroup("job", 1), node("n1"), pod("p", node_name="n1", phase="Running"))
    expect(why_pod(snapshot, NS, "p", []), "Running", "the pod is running on node n1")
    gone = why_pod(snapshot, NS, "nobody", [])
    assert gone.reason.code == "NotFound" and gone.to_json()["task"] is None
    assert why_job(snapshot, NS, "nojob", {}).reason.code == "NotFound"
    assert why_job(snapshot_of(queue(), podgroup("job", 2)), NS, "job", {}).reason.code == "NoTasks"


def test_the_answer_does_not_depend_on_the_hash_seed(tmp_path: Path):
    """Nodes and tasks sit in hash-sharded maps: two processes must still print the same bytes."""
    trace = trace_file(tmp_path / "t.jsonl", [*CROWD, *TAINTED[2:], pod("q", cpu="2"), pod("r", cpu="4")])
    code = (
        "import sys, json; from pathlib import Path; from strata.projector.replay import replay_file;"
        "from strata.projector.fold.explain import why_job; s = replay_file(Path(sys.argv[1]))[0].snapshot();"
        "answer = why_job(s, 'team', 'job', {}); print(json.dumps(answer.to_json(), sort_keys=True), answer.lines())"
    )
    outputs = {
        subprocess.run(
            [sys.executable, "-c", code, str(trace)],
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONHASHSEED": seed},
            check=True,
        ).stdout
        for seed in ("0", "1", "4242")
    }
    assert len(outputs) == 1


# ------------------------------------------------------------------------- on the real broker
WHY = "import sys; from strata.cli import main; from strata.cli.why import why; main.add_command(why); main()"


def why_cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """`strata why ...` through the CLI's own main (the group is registered here, as cli.py will)."""
    return subprocess.run(
        [sys.executable, "-c", WHY, "why", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **env},
    )


def why_json(*args: str, env: dict[str, str]) -> dict[str, Any]:
    out = why_cli(*args, "-o", "json", env=env)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


BROKER_TRACE = [
    queue(),
    podgroup("job", 2),
    node("n1", cpu="4"),
    node("n2", unschedulable=True),
    node("n3", cpu="2", taints=[{"key": "dedicated", "value": "batch", "effect": "NoSchedule"}]),
    pod("p0", cpu="3"),
    pod("p1", cpu="3", tolerations=[{"key": "dedicated", "operator": "Equal", "value": "batch"}]),
    bind("p0", "n1", replica="r1"),  # offset 7: admitted
    {"type": "BIND_GROUP", "binds": [{"pod": "uid-p1", "node": "n1"}], "replica": "r2"},  # 8: no room left
]


@pytest.mark.kafka
def test_why_on_the_broker_now_and_in_the_past(kafka: Settings, tmp_path: Path):
    env = {**env_of(kafka), "STRATA_DB_URL": f"sqlite:///{tmp_path / 'c.db'}"}
    published = run("ingest", "--from", str(trace_file(tmp_path / "t.jsonl", BROKER_TRACE)), env=env)
    assert published.returncode == 0, published.stderr
    projected = run("project", "--stop-at-end", env=env, timeout=120)
    assert projected.returncode == 0, projected.stderr

    now = why_json("pod", f"{NS}/p1", env=env)
    # p1 tolerates n3's taint (read from its object in the log): n3 is refused for cpu, not the taint
    expect(now, "Unschedulable", "0/3 nodes are available: 1 node(s) were unschedulable, 2 Insufficient cpu.")
    assert now["version"] == len(BROKER_TRACE)
    assert now["tolerations"] == [{"key": "dedicated", "operator": "Equal", "value": "batch", "effect": ""}]
    assert now["binds"] == [
        {
            "offset": 8,
            "node": "n1",
            "replica": "r2",
            "verdict": "rejected",
            "reason": "cpu does not fit on node n1 (bind 1 of 1, pod uid-p1)",
        },
    ]
    expect(
        why_json("pod", f"{NS}/p0", env=env),
        "Binding",
        "a BIND to node n1 was admitted at offset 7; the binder has not bound the pod yet",
    )

    past = why_json("pod", f"{NS}/p1", "--at", "6", env=env)  # after p1 appeared, before any BIND
    expect(
        past,
        "Pending",
        "1/3 nodes fit the task; no scheduler replica has bound it yet; "
        "its gang needs 2 more bound task(s) to reach minMember 2",
    )
    assert (past["version"], past["binds"], past["nodes"]["fit"]) == (7, [], 1)
    with pytest.raises(AssertionError):  # the past is not the present: the checker tells them apart
        expect(past, now["reason"], now["message"])

    job = why_json("job", f"{NS}/job", env=env)
    expect(
        job,
        "Unschedulable",
        "1/1 pending task(s) fit no node; p1: 0/3 nodes are available: "
        "1 node(s) were unschedulable, 2 Insufficient cpu.",
    )
    assert [(t["name"], t["status"], len(t["binds"])) for t in job["tasks"]] == [
        ("p0", "Binding", 1),
        ("p1", "Pending", 1),
    ]

    table = why_cli("pod", f"{NS}/p1", env=env)
    assert table.returncode == 0, table.stderr
    assert table.stdout.splitlines()[:2] == [
        f"pod {NS}/p1 at version {len(BROKER_TRACE)}: Pending",
        "  Unschedulable: 0/3 nodes are available: 1 node(s) were unschedulable, 2 Insufficient cpu.",
    ]
    assert "  offset 8: BIND to n1 by r2: rejected: cpu does not fit on node n1 (bind 1 of 1, pod uid-p1)" in (
        table.stdout.splitlines()
    )


@pytest.mark.kafka
def test_why_a_job_of_the_sample_history_waits(kafka: Settings, tmp_path: Path):
    """`strata demo`, then `strata why`: the sample's job ml/train lost a pod to an eviction and
    waits with one of its two members; before the binds, both waited for the gang."""
    demo = run("demo", env=env_of(kafka), timeout=120)
    assert demo.returncode == 0, demo.stderr
    prefix = demo.stdout.split("--topic-prefix ")[1].split()[0]
    assert prefix.startswith(kafka.topic_prefix)
    env = {**env_of(kafka), "STRATA_TOPIC_PREFIX": prefix, "STRATA_DB_URL": f"sqlite:///{tmp_path / 'c.db'}"}

    out = why_cli("job", "ml/train", env=env)  # no projector ran: why catches the index up itself
    assert out.returncode == 0, out.stderr
    assert "indexing offsets 0 to" in out.stderr
    answer = why_json("job", "ml/train", env=env)
    expect(
        answer,
        "GangUnschedulable",
        "1/1 tasks in gang unschedulable: pod group is not ready, 1 Running, 2 minAvailable",
    )
    assert answer["queue"] == {"name": "research", "stored": True, "state": "Open"}
    assert [(t["name"], t["status"], t["node"]) for t in answer["tasks"]] == [("train-0", "Running", "node-a")]

    before = why_json("job", "ml/train", "--at", "13", env=env)
    expect(
        before,
        "Pending",
        "2 pending task(s) fit a node; no scheduler replica has bound them yet; "
        "its gang needs 2 more bound task(s) to reach minMember 2",
    )
    assert why_json("pod", "ml/train-1", env=env)["reason"] == "NotFound"  # evicted, then deleted
    evicted = why_json("pod", "ml/train-1", "--at", "23", env=env)  # right after the EVICT
    assert (evicted["reason"], evicted["task"]["node"]) == ("Releasing", "node-a")
    assert [(b["offset"], b["replica"], b["verdict"]) for b in evicted["binds"]] == [(17, "scheduler-1", "admitted")]
    assert before["gang"]["message"] == (
        "2/2 tasks in gang unschedulable: pod group is not ready, 2 Pending, 2 minAvailable"
    )
    assert [(n["tasks"], n["message"]) for n in before["nodes"]] == [
        (["train-0", "train-1"], "3/3 nodes are available.")
    ]


def test_a_bad_name_is_one_line_before_kafka_is_asked():
    out = why_cli("pod", "no-namespace", env={"STRATA_KAFKA_BOOTSTRAP": "127.0.0.1:1"})
    assert out.returncode == 1
    assert out.stderr == "strata: error: a pod is named NAMESPACE/NAME, not 'no-namespace'\n"
