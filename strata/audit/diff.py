"""What changed between two canonical snapshots (`strata diff`)."""

from __future__ import annotations

from typing import Any


def _delta(a: dict[str, int], b: dict[str, int]) -> dict[str, int]:
    return {k: b.get(k, 0) - a.get(k, 0) for k in sorted(set(a) | set(b)) if b.get(k, 0) != a.get(k, 0)}


def _fields(a: dict[str, Any], b: dict[str, Any], skip: tuple[str, ...] = ()) -> dict[str, list[Any]]:
    return {k: [a.get(k), b.get(k)] for k in sorted(set(a) | set(b)) if k not in skip and a.get(k) != b.get(k)}


def _tasks(snapshot: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {uid: {**t, "job": key} for key, job in snapshot["jobs"].items() for uid, t in job["tasks"].items()}


def diff(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """Nodes added/removed and their used/idle deltas; tasks whose status or node changed;
    jobs and queues added, removed or changed."""
    nodes_changed = {}
    change: dict[str, Any]  # a node's, a task's, a job's or a queue's changes
    for name in sorted(set(a["nodes"]) & set(b["nodes"])):
        x, y = a["nodes"][name], b["nodes"][name]
        change = {k: d for k in ("used", "idle", "releasing", "allocatable") if (d := _delta(x[k], y[k]))}
        change.update(_fields(x, y, skip=("used", "idle", "releasing", "allocatable", "capability", "tasks")))
        if change:
            nodes_changed[name] = change
    ta, tb = _tasks(a), _tasks(b)
    tasks_changed = {}
    for uid in sorted(set(ta) & set(tb)):
        change = {k: [ta[uid][k], tb[uid][k]] for k in ("status", "node") if ta[uid][k] != tb[uid][k]}
        if change:
            tasks_changed[uid] = {"name": f"{tb[uid]['namespace']}/{tb[uid]['name']}", **change}
    return {
        "from": a["version"],
        "to": b["version"],
        "nodes": _section(a["nodes"], b["nodes"], nodes_changed),
        "tasks": _section(ta, tb, tasks_changed),
        "jobs": _section(
            a["jobs"],
            b["jobs"],
            {
                key: change
                for key in sorted(set(a["jobs"]) & set(b["jobs"]))
                if (change := _fields(a["jobs"][key], b["jobs"][key], skip=("tasks",)))
            },
        ),
        "queues": _section(
            a["queues"],
            b["queues"],
            {
                name: change
                for name in sorted(set(a["queues"]) & set(b["queues"]))
                if (change := _fields(a["queues"][name], b["queues"][name]))
            },
        ),
    }


def _section(a: dict[str, Any], b: dict[str, Any], changed: dict[str, Any]) -> dict[str, Any]:
    return {"added": sorted(set(b) - set(a)), "removed": sorted(set(a) - set(b)), "changed": changed}


def is_empty(d: dict[str, Any]) -> bool:
    return not any(d[s][part] for s in ("nodes", "tasks", "jobs", "queues") for part in ("added", "removed", "changed"))


def render(d: dict[str, Any]) -> list[str]:
    """The diff as lines a person reads."""
    lines = [f"from version {d['from']} to version {d['to']}"]
    for section in ("nodes", "tasks", "jobs", "queues"):
        part = d[section]
        for name in part["added"]:
            lines.append(f"+ {section[:-1]} {name}")
        for name in part["removed"]:
            lines.append(f"- {section[:-1]} {name}")
        for name, change in part["changed"].items():
            shown = []
            for k, v in change.items():
                if k == "name":
                    continue
                if isinstance(v, list) and len(v) == 2:
                    shown.append(f"{k} {v[0]} -> {v[1]}")
                else:
                    shown.append(f"{k} " + " ".join(f"{r}{n:+d}" for r, n in v.items()))
            label = f"{name} ({change['name']})" if "name" in change else name
            lines.append(f"~ {section[:-1]} {label}: " + "; ".join(shown))
    if is_empty(d):
        lines.append("no change")
    return lines
