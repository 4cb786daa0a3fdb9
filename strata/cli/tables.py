"""Readable summaries of a canonical snapshot for `--output table`."""

from __future__ import annotations

from collections import Counter
from typing import Any

from rich.console import Console
from rich.table import Table


def _cpu(m: int) -> str:
    return f"{m / 1000:g}"


def _gib(b: int) -> str:
    return f"{b / 2**30:.1f}Gi"


def print_snapshot_tables(snapshot: dict[str, Any], console: Console) -> None:
    console.print(f"version {snapshot['version']}, default priority {snapshot['defaultPriority']}")
    nodes = Table(title=f"nodes ({len(snapshot['nodes'])})")
    for col in ("node", "cpu used/alloc", "memory used/alloc", "tasks", "releasing cpu", "flags"):
        nodes.add_column(col)
    for name in snapshot["nodeList"]:
        n = snapshot["nodes"][name]
        flags = ",".join(
            f for f, on in (("unschedulable", n["unschedulable"]), ("revocable", n["revocableZone"])) if on
        )
        nodes.add_row(
            name,
            f"{_cpu(n['used'].get('cpu', 0))}/{_cpu(n['allocatable'].get('cpu', 0))}",
            f"{_gib(n['used'].get('memory', 0))}/{_gib(n['allocatable'].get('memory', 0))}",
            str(len(n["tasks"])),
            _cpu(n["releasing"].get("cpu", 0)),
            flags,
        )
    console.print(nodes)
    jobs = Table(title=f"jobs ({len(snapshot['jobs'])})")
    statuses = ["Pending", "Binding", "Bound", "Running", "Releasing", "Succeeded", "Failed", "Unknown"]
    for col in ("job", "queue", "priority", "min", *statuses):
        jobs.add_column(col)
    for key in sorted(snapshot["jobs"]):
        j = snapshot["jobs"][key]
        counts = Counter(t["status"] for t in j["tasks"].values())
        jobs.add_row(
            key, j["queue"], str(j["priority"]), str(j["minAvailable"]), *(str(counts[s] or "") for s in statuses)
        )
    console.print(jobs)
    queues = Table(title=f"queues ({len(snapshot['queues'])})")
    for col in ("queue", "weight", "state", "parent", "reclaimable", "jobs"):
        queues.add_column(col)
    jobs_per_queue = Counter(j["queue"] for j in snapshot["jobs"].values())
    for name in sorted(snapshot["queues"]):
        q = snapshot["queues"][name]
        queues.add_row(
            name, str(q["weight"]), q["state"], q["parent"], str(q["reclaimable"]), str(jobs_per_queue[name])
        )
    console.print(queues)
