"""What each page shows, as JSON-ready values, from a snapshot, its figures and the audit index's
entries (pure: the routes fetch, this computes).

Where the CLI already prints something, the same shape is used: a node's and a job's entry as in
`strata snapshot -o json` (``nodes[NAME]``, ``jobs[NS/NAME]``), history entries as in
`strata history -o json`, a story's lines as `strata story` prints them, the why panel as
`strata why -o json`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from operator import itemgetter
from typing import Any

from strata.projector.fold import kinds
from strata.projector.fold.kinds import PodView
from strata.projector.fold.resources import BadQuantity, nonzero, parse_resources
from strata.projector.fold.snapshot import Snapshot
from strata.projector.fold.task import ALLOCATED, OFF_NODE, TaskStatus
from strata.ui.derived import Figures, accumulate, queue_figures

HEAT_RESOURCES = ("cpu", "memory", "pods")
PAGE_ROWS = 100  # jobs listed per page of the cluster view
TERMINAL = ("Succeeded", "Failed")
BUSIEST = 10  # nodes listed by their share of cpu used
_NONE: dict[str, int] = {}  # read only


# ------------------------------------------------------------------------- canonical entries
def tasks_where(snapshot: Snapshot, *, job: str | None = None, node: str | None = None) -> list[tuple[str, PodView]]:
    """(uid, task) of one job's or one node's tasks: a pass over the tasks, with nothing but a
    comparison for most of them."""
    if job is not None:
        return sorted(((uid, t) for uid, t in snapshot.tasks.items() if t.job == job), key=lambda p: p[0])
    return sorted(((uid, t) for uid, t in snapshot.tasks.items() if t.node == node), key=lambda p: p[0])


def tasks_among(snapshot: Snapshot, uids: Iterable[str]) -> list[tuple[str, PodView]]:
    """(uid, task) of the tasks ``uids`` names (a job's or a node's, from the version's figures,
    which index them), as ``tasks_where`` returns them, without a pass over every task."""
    tasks = snapshot.tasks
    return sorted((uid, tasks[uid]) for uid in uids)


def task_entry(uid: str, t: PodView) -> dict[str, Any]:
    """A task as the canonical snapshot writes it under its job."""
    return {
        "uid": uid,
        "name": t.name,
        "namespace": t.namespace,
        "node": t.node,
        "status": str(t.status),
        "priority": t.priority,
        "resreq": nonzero(t.resreq),
        "preemptable": t.preemptable,
        "bestEffort": t.best_effort,
        "role": t.role,
    }


def job_entry(snapshot: Snapshot, key: str, tasks: Sequence[tuple[str, PodView]]) -> dict[str, Any] | None:
    """``jobs[key]`` of `strata snapshot -o json` (None when the job is not shown there)."""
    pg = snapshot.podgroups.get(key)
    if pg is None or snapshot.job_queue(pg) not in snapshot.queues:
        return None
    allocated: dict[str, int] = {}
    total: dict[str, int] = {}
    for _uid, t in tasks:
        accumulate(total, t.resreq)
        if t.status in ALLOCATED:
            accumulate(allocated, t.resreq)
    return {
        "name": pg.name,
        "namespace": pg.namespace,
        "podGroupUid": pg.uid,
        "queue": snapshot.job_queue(pg),
        "minAvailable": pg.min_member,
        "taskMinAvailable": dict(pg.min_task_member),
        "podGroupPhase": pg.phase,
        "preemptable": pg.preemptable,
        "priority": snapshot.job_priority(pg),
        "allocated": nonzero(allocated),
        "totalRequest": nonzero(total),
        "tasks": {uid: task_entry(uid, t) for uid, t in tasks},
    }


def node_entry(snapshot: Snapshot, name: str, tasks: Sequence[tuple[str, PodView]]) -> dict[str, Any] | None:
    """``nodes[name]`` of `strata snapshot -o json` (None when the node is not stored)."""
    n = snapshot.nodes.get(name)
    if n is None:
        return None
    csi = snapshot.csinodes.get(name)
    allocatable = kinds.node_allocatable(n, csi)
    used = snapshot.node_used.get(name) or {}
    idle = dict(allocatable)
    for k, v in used.items():
        idle[k] = idle.get(k, 0) - v
    releasing: dict[str, int] = {}
    on_node = []
    for uid, t in tasks:
        if t.status in OFF_NODE:
            continue
        on_node.append(uid)
        if t.status == TaskStatus.RELEASING:
            accumulate(releasing, t.resreq)
    return {
        "allocatable": nonzero(allocatable),
        "capability": nonzero(kinds.node_capability(n, csi)),
        "idle": nonzero(idle),
        "used": nonzero(used),
        "releasing": nonzero(releasing),
        "pipelined": {},
        "tasks": sorted(on_node),
        "unschedulable": n.unschedulable,
        "taints": [{"key": t.key, "value": t.value, "effect": t.effect} for t in n.taints],
        "labels": dict(n.labels),
        "revocableZone": n.revocable_zone,
    }


# ----------------------------------------------------------------------------------- cluster
@dataclass(frozen=True)
class JobFilter:
    phase: str = ""
    queue: str = ""
    text: str = ""  # a part of NS/NAME
    page: int = 0

    @property
    def keeps_all(self) -> bool:
        return not (self.phase or self.queue or self.text)

    def keeps(self, key: str, queue: str, phase: str) -> bool:
        return (
            (not self.phase or phase == self.phase)
            and (not self.queue or queue == self.queue)
            and (not self.text or self.text in key)
        )


def cluster(
    snapshot: Snapshot, figures: Figures, jobs: JobFilter, node_text: str = "", rows: HeatRows | None = None
) -> dict[str, Any]:
    return {
        "version": snapshot.version,
        "nodes": heat(snapshot, node_text, rows),
        "tasks": figures.by_status(),
        "queues": queues(snapshot, figures),
        "jobs": job_table(snapshot, figures, jobs),
    }


# node name -> (its view, its used, its CSINode, its heat row): a row is made again only when one
# of the three is another object (most nodes' are the same from one version to the next)
HeatRows = dict[str, tuple[Any, Any, Any, list[Any]]]


def heat(snapshot: Snapshot, text: str = "", kept: HeatRows | None = None) -> dict[str, Any]:
    """Every node (whose name holds ``text``) with used and allocatable per HEAT_RESOURCES, in
    the node list's order: [name, [used, allocatable] per resource, unschedulable]. Rows are
    taken from ``kept`` where their node's objects are the same, and kept there."""
    rows: list[list[Any]] = []
    # plain dicts: a sharded map's lookup is a Python call, 15,000 of them here
    nodes = dict(snapshot.nodes.items())
    used_by_node = dict(snapshot.node_used.items())
    csinodes = dict(snapshot.csinodes.items())
    allocatable_of = kinds.node_allocatable
    cpu, memory, pods = HEAT_RESOURCES
    for name in snapshot.node_list():
        if text and text not in name:
            continue
        n = nodes[name]
        csi = csinodes.get(name)
        found = used_by_node.get(name)
        if kept is not None:
            hit = kept.get(name)
            if hit is not None and hit[0] is n and hit[1] is found and hit[2] is csi:
                rows.append(hit[3])
                continue
        allocatable = allocatable_of(n, csi)
        used = found or _NONE
        row = [
            name,
            [used.get(cpu, 0), allocatable.get(cpu, 0)],
            [used.get(memory, 0), allocatable.get(memory, 0)],
            [used.get(pods, 0), allocatable.get(pods, 0)],
            n.unschedulable,
        ]
        rows.append(row)
        if kept is not None:
            kept[name] = (n, found, csi, row)
    busiest = sorted(rows, key=lambda row: (-(row[1][0] / row[1][1] if row[1][1] else 0.0), row[0]))[:BUSIEST]
    return {"resources": list(HEAT_RESOURCES), "count": len(snapshot.nodes), "rows": rows, "busiest": busiest}


def queues(snapshot: Snapshot, figures: Figures) -> list[dict[str, Any]]:
    found = queue_figures(snapshot, figures)
    sums, jobs = found.sums, found.jobs
    out = []
    for name, q in sorted(snapshot.queues.items()):
        allocated, request = sums.get(name, ({}, {}))
        out.append(
            {
                "name": name,
                "state": q.state,
                "weight": q.weight,
                "parent": q.parent,
                "capability": nonzero(q.capability),
                "deserved": nonzero(q.deserved),
                "guarantee": nonzero(q.guarantee),
                "allocated": nonzero(allocated),
                "request": nonzero(request),
                "jobs": jobs.get(name, 0),
            }
        )
    return out


def job_table(snapshot: Snapshot, figures: Figures, f: JobFilter) -> dict[str, Any]:
    if "jobs" not in figures.memo:  # once per version: every PodGroup, sorted, and the phases
        every = [(key, pg, snapshot.job_queue(pg), pg.phase or "") for key, pg in snapshot.podgroups.items()]
        # by the key alone: a tuple's comparison tests its first items for equality before
        # ordering them, two reads of each key's string (far apart in a large heap) where one does
        every.sort(key=itemgetter(0))
        figures.memo["jobs"] = (every, dict(sorted(Counter(map(itemgetter(3), every)).items())))
    every, phases = figures.memo["jobs"]
    # the unfiltered table (the page's default) takes no call per job
    matching = every if f.keeps_all else [job for job in every if f.keeps(job[0], job[2], job[3])]
    start = f.page * PAGE_ROWS
    rows = []
    for key, pg, queue, _phase in matching[start : start + PAGE_ROWS]:
        job = figures.jobs.get(key)
        rows.append(
            {
                "key": key,
                "namespace": pg.namespace,
                "name": pg.name,
                "queue": queue,
                "phase": pg.phase,
                "minMember": pg.min_member,
                "tasks": job.by_status() if job else {},
                "allocated": nonzero(job.allocated) if job else {},
            }
        )
    return {
        "phases": dict(phases),
        "total": len(snapshot.podgroups),
        "matching": len(matching),
        "page": f.page,
        "pageRows": PAGE_ROWS,
        "rows": rows,
    }


# -------------------------------------------------------------------------- series over time
def gang_series(entries: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """A job's progress after each of its history entries: pods that exist, pods placed (an
    admitted bind, or a node named in the pod), pods running."""
    pods: set[str] = set()
    placed: set[str] = set()
    running: set[str] = set()
    by_uid: dict[str, str] = {}
    seen = PodFields()
    out = []
    for e in entries:
        _gang_step(e, seen.after(e), pods, placed, running, by_uid)
        out.append(
            {
                "offset": e["offset"],
                "time": e["time"],
                "pods": len(pods),
                "placed": len(placed),
                "running": len(running),
            }
        )
    return out


def _gang_step(
    e: dict[str, Any],
    fields: dict[str, Any],
    pods: set[str],
    placed: set[str],
    running: set[str],
    by_uid: dict[str, str],
) -> None:
    t = e["type"]
    if e.get("kind") == "Pod" and e.get("outcome") == "applied":
        name = f"{e.get('namespace')}/{e.get('name')}"
        if e.get("uid"):
            by_uid[e["uid"]] = name
        if t == "DELETED":
            for s in (pods, placed, running):
                s.discard(name)
            return
        pods.add(name)
        _toggle(placed, name, bool(fields.get("nodeName")) or name in placed)
        _toggle(running, name, fields.get("phase") == "Running")
        if fields.get("phase") in TERMINAL:
            placed.discard(name)
    elif t == "BIND" and e.get("outcome") == "admitted":
        placed.add(by_uid.get(e.get("pod", ""), f"{e.get('namespace')}/{e.get('name')}"))
    elif t == "BIND_GROUP" and e.get("outcome") == "admitted":
        for b in e.get("binds") or []:
            placed.add(by_uid.get(b.get("pod", ""), f"{b.get('namespace')}/{b.get('name')}"))
    elif t == "BIND_FAILED" and e.get("outcome") == "reverted":
        placed.discard(by_uid.get(e.get("pod", ""), f"{e.get('namespace')}/{e.get('name')}"))


class PodFields:
    """A pod's shown fields after each history entry: a history entry carries only what changed
    since the pod's previous entry (``changes``), so they are added up along the entries."""

    def __init__(self) -> None:
        self._fields: dict[str, dict[str, Any]] = {}

    def after(self, e: dict[str, Any]) -> dict[str, Any]:
        if e.get("kind") != "Pod" or "changes" not in e:
            return {}
        name = f"{e.get('namespace')}/{e.get('name')}"
        fields = self._fields.setdefault(name, {})
        for f, (_before, after) in e["changes"].items():
            fields[f] = after
        if e["type"] == "DELETED":
            return self._fields.pop(name)
        return fields


def _toggle(members: set[str], name: str, on: bool) -> None:
    if on:
        members.add(name)
    else:
        members.discard(name)


def node_usage_series(
    entries: Iterable[dict[str, Any]], tasks: Sequence[tuple[str, PodView]], node: str
) -> list[dict[str, Any]]:
    """A node's tasks and requested cpu and memory after each of its history entries.

    The audit keeps a pod's containers' requests, not the fold's whole request (init containers,
    overhead): a task still on the node (``tasks``, the snapshot's) counts with the fold's own
    request, one gone since with the sum of its containers' requests as recorded."""
    on: dict[str, dict[str, int]] = {}  # pod NS/NAME -> its request, while it holds the node
    known: dict[str, dict[str, int]] = {}  # pod NS/NAME -> its request as last seen
    by_uid: dict[str, str] = {}
    exact = {f"{t.namespace}/{t.name}": t.resreq for _uid, t in tasks}
    seen = PodFields()
    out = []
    for e in entries:
        name = f"{e.get('namespace')}/{e.get('name')}"
        fields = seen.after(e)
        if e.get("kind") == "Pod" and e.get("outcome") == "applied":
            if e.get("uid"):
                by_uid[e["uid"]] = name
            known[name] = exact.get(name) or _containers_request(fields.get("requests"))
            holds = e["type"] != "DELETED" and fields.get("nodeName") == node and fields.get("phase") not in TERMINAL
            if holds:
                on[name] = known[name]
            else:
                on.pop(name, None)
        elif e["type"] == "BIND" and e.get("outcome") == "admitted" and e.get("node") == node:
            pod = by_uid.get(e.get("pod", ""), name)
            on[pod] = known.get(pod) or exact.get(pod) or {}
        elif e["type"] == "BIND_GROUP" and e.get("outcome") == "admitted":
            for b in e.get("binds") or []:
                if b.get("node") == node:
                    pod = by_uid.get(b.get("pod", ""), f"{b.get('namespace')}/{b.get('name')}")
                    on[pod] = known.get(pod) or exact.get(pod) or {}
        elif e["type"] == "BIND_FAILED" and e.get("outcome") == "reverted":
            on.pop(by_uid.get(e.get("pod", ""), name), None)
        out.append(
            {
                "offset": e["offset"],
                "time": e["time"],
                "tasks": len(on),
                "cpu": sum(r.get("cpu", 0) for r in on.values()),
                "memory": sum(r.get("memory", 0) for r in on.values()),
            }
        )
    return out


def _containers_request(requests: Any) -> dict[str, int]:
    total: dict[str, int] = {}
    if not isinstance(requests, dict):
        return total
    for container in requests.values():
        try:
            accumulate(total, parse_resources(container))
        except (BadQuantity, TypeError, ValueError):
            continue  # a bad record's request: the fold refused it too
    return total
