"""The fold's working state as bytes, for checkpoints: deterministic JSON, zstd-compressed.

Not pickle: a checkpoint may come from a shared database, and loading one must never run code.
Every map is written sorted by key, so the same state always gives the same bytes whatever
Python's hash seed; ``decode(encode(s))`` continues the fold exactly where ``s`` stood.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

import zstandard

from strata.projector import kinds
from strata.projector.cowmap import CowMap
from strata.projector.kinds import FoldConfig
from strata.projector.state import CacheState
from strata.projector.task import TaskStatus

FORMAT = 1


class StateFormatError(ValueError):
    """Bytes that are not a state this code can load."""


def _rows(m: CowMap[Any, Any] | dict[Any, Any]) -> list[Any]:
    return [[k, list(v) if isinstance(v, tuple) else v] for k, v in sorted(m.items())]


def encode(state: CacheState) -> bytes:
    tasks = []
    for uid, task in sorted(state.tasks.items()):
        # most tasks are their pod's derivation: write a reference, not a copy
        base = state.pods.get(state.pod_uids[uid])
        tasks.append([uid, None if base is task else list(task)])
    doc = {
        "format": FORMAT,
        "config": {"schedulerNames": list(state.config.scheduler_names), "defaultQueue": state.config.default_queue},
        "version": state.version,
        "pods": [[list(k), list(v)] for k, v in sorted(state.pods.items())],
        "tasks": tasks,
        "overlays": [[uid, overlay, origin] for uid, (overlay, origin) in sorted(state.overlays.items())],
        "nodeUsed": _rows(state.node_used),
        "nodes": [[k, _node_row(v)] for k, v in sorted(state.nodes.items())],
        "nodeSeq": _rows(state.node_seq),
        "nextNodeSeq": state.next_node_seq,
        "csinodes": _rows(state.csinodes),
        "podgroups": _rows(state.podgroups),
        "queues": _rows(state.queues),
        "priorityClasses": _rows(state.priority_classes),
        "defaultPriority": state.default_priority,
        "hypernodes": [[k, _hypernode_row(v)] for k, v in sorted(state.hypernodes.items())],
        "synced": sorted(state.synced),
    }
    raw = json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    return zstandard.ZstdCompressor(level=3).compress(raw)


_TAINTS = kinds.NodeView._fields.index("taints")
_MEMBERS = kinds.HyperNodeView._fields.index("members")


def _node_row(node: kinds.NodeView) -> list[Any]:
    row: list[Any] = list(node)
    row[_TAINTS] = [list(t) for t in node.taints]
    return row


def _hypernode_row(hypernode: kinds.HyperNodeView) -> list[Any]:
    row: list[Any] = list(hypernode)
    row[_MEMBERS] = [list(m) for m in hypernode.members]
    return row


def decode(data: bytes) -> CacheState:
    try:
        doc = json.loads(zstandard.ZstdDecompressor().decompress(data))
    except (zstandard.ZstdError, ValueError) as exc:
        raise StateFormatError(f"not a Strata state: {exc}") from exc
    if doc.get("format") != FORMAT:
        raise StateFormatError(f"state format {doc.get('format')!r}; this Strata reads format {FORMAT}")
    config = FoldConfig(tuple(doc["config"]["schedulerNames"]), doc["config"]["defaultQueue"])
    state = CacheState(config)
    state.version = doc["version"]
    for (ns, name), v in doc["pods"]:
        pod = _pod_view(v)
        state.pods[(ns, name)] = pod
        state.pod_uids[pod.uid] = (ns, name)
    for uid, task in doc["tasks"]:
        state.tasks[uid] = state.pods[state.pod_uids[uid]] if task is None else _pod_view(task)
    for uid, *overlay in doc["overlays"]:
        # before origins were kept a row was [uid, overlay]: -1 matches no offset a failure names
        state.overlays[uid] = (TaskStatus(overlay[0]), overlay[1] if len(overlay) > 1 else -1)
    for node, used in doc["nodeUsed"]:
        state.node_used[node] = used
    for name, v in doc["nodes"]:
        node = kinds.NodeView(*v)
        state.nodes[name] = node._replace(taints=tuple(kinds.Taint(*t) for t in node.taints))
    for name, seq in doc["nodeSeq"]:
        state.node_seq[name] = seq
    state.next_node_seq = doc["nextNodeSeq"]
    for name, v in doc["csinodes"]:
        state.csinodes[name] = kinds.CSINodeView(*v)
    for key, v in doc["podgroups"]:
        state.podgroups[key] = kinds.PodGroupView(*v)
    for name, v in doc["queues"]:
        state.queues[name] = kinds.QueueView(*v)
    for name, v in doc["priorityClasses"]:
        state.priority_classes[name] = kinds.PriorityClassView(*v)
    state.default_priority = doc["defaultPriority"]
    for name, v in doc["hypernodes"]:
        hypernode = kinds.HyperNodeView(*v)
        members = tuple(kinds.Member(*m[:3], _requirements(m[3])) for m in hypernode.members)
        state.hypernodes[name] = hypernode._replace(members=members)
    state.synced = set(doc.get("synced", ()))  # absent from checkpoints written before it was kept
    return state


def _requirements(rows: Iterable[Sequence[Any]] | None) -> kinds.Requirements | None:
    return None if rows is None else tuple((key, op, tuple(values)) for key, op, values in rows)


def _pod_view(fields: list[Any]) -> kinds.PodView:
    view = kinds.PodView(*fields)
    return view._replace(status=TaskStatus(view.status))  # JSON holds the text; the fold, the type
