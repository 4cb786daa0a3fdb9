"""The fold's working state as bytes, for checkpoints: MessagePack, zstd-compressed.

Not pickle: a checkpoint may come from a shared database, and loading one must never run code;
MessagePack holds only data, and its C unpacker reads 150k pods in a fraction of what JSON took
(a cold start is mostly this). Every map is written sorted by key, so the same state always
gives the same bytes whatever Python's hash seed; ``decode(encode(s))`` continues the fold
exactly where ``s`` stood. A checkpoint may also keep the fragments of its snapshot's canonical
JSON (``snapshot.Fragments``), so that the digest after a restore renders only what changed.

Format 1, the same document as JSON, is still read, and written for a state holding an integer
beyond MessagePack's 64 bits (a quantity of that size is valid input, and rare).
"""

from __future__ import annotations

import gc
import json
from collections.abc import Iterable, Sequence
from operator import itemgetter
from typing import Any

import msgpack
import msgspec
import zstandard

from strata.projector.fold import kinds
from strata.projector.fold.cowmap import CowMap
from strata.projector.fold.kinds import FoldConfig
from strata.projector.fold.layered import Layered
from strata.projector.fold.snapshot import Fragments, Snapshot
from strata.projector.fold.state import CacheState
from strata.projector.fold.task import TaskStatus

FORMAT = 2
JSON_FORMAT = 1
_STATUS = {status.value: status for status in TaskStatus}
# Items sorted by their key alone: the same order as sorting the pairs (keys are unique), but the
# sort compares keys, not pairs: at 150,000 pods the tasks sort in 0.39 s, not 0.64 s, the pods
# in 0.42 s, not 0.58 s (best of five).
_KEY = itemgetter(0)
# msgspec writes the bytes msgpack's packb(use_bin_type=True) wrote, in half the time (0.58 s
# against 0.97-1.12 s for a checkpoint at 150,000 pods); msgpack still reads them.
_PACK = msgspec.msgpack.Encoder().encode
# Level 1: 0.19 s and 17.9 MB for that checkpoint, level 3 0.41 s and 19.7 MB (best of five).
ZSTD_LEVEL = 1


class StateFormatError(ValueError):
    """Bytes that are not a state this code can load."""


def _rows(m: CowMap[Any, Any] | dict[Any, Any] | Layered[Any, Any]) -> list[Any]:
    # MessagePack writes a tuple (a view's NamedTuple too) as the array a list makes: no copies
    return sorted(m.items(), key=_KEY)


def encode(state: CacheState, fragments: Fragments | None = None) -> bytes:
    """The state's bytes; with ``fragments`` of its own version, those too."""
    doc = _document(state)
    if fragments is not None and fragments.snapshot.version == state.version:
        doc["fragments"] = {
            "nodes": _rows(fragments.nodes),
            "jobs": _rows(fragments.jobs),
            "hypernodes": _rows(fragments.hypernodes),
        }
    try:
        raw = _PACK({"format": FORMAT, **doc})
    except OverflowError:  # an integer beyond 64 bits: JSON holds any
        doc.pop("fragments", None)
        raw = json.dumps({"format": JSON_FORMAT, **doc}, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    return zstandard.ZstdCompressor(level=ZSTD_LEVEL).compress(raw)


def _document(state: CacheState) -> dict[str, Any]:
    tasks = []
    pods, pod_uids = state.pods, state.pod_uids
    for uid, task in _rows(state.tasks):
        # most tasks are their pod's derivation: write a reference, not a copy
        tasks.append((uid, None if pods.get(pod_uids[uid]) is task else task))
    return {
        "config": {"schedulerNames": list(state.config.scheduler_names), "defaultQueue": state.config.default_queue},
        "version": state.version,
        "pods": _rows(state.pods),
        "tasks": tasks,
        "overlays": [(uid, *overlay) for uid, overlay in _rows(state.overlays)],
        "nodeUsed": _rows(state.node_used),
        "nodes": [[k, _node_row(v)] for k, v in _rows(state.nodes)],
        "nodeSeq": _rows(state.node_seq),
        "nextNodeSeq": state.next_node_seq,
        "csinodes": _rows(state.csinodes),
        "podgroups": _rows(state.podgroups),
        "queues": _rows(state.queues),
        "priorityClasses": _rows(state.priority_classes),
        "defaultPriority": state.default_priority,
        "hypernodes": [[k, _hypernode_row(v)] for k, v in _rows(state.hypernodes)],
        "synced": sorted(state.synced),
    }


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


def fragments_of(data: bytes, snapshot: Snapshot) -> Fragments | None:
    """The fragments a checkpoint keeps, for ``snapshot`` (the state at the checkpoint's version,
    held by whoever asks): None unless the bytes are of that version and keep them. The rest of
    the state is skipped, not built: a fraction of a restore (the next checkpoint renders from
    these what changed since, which is how a follower's checkpoints cost what changed)."""
    try:
        raw = zstandard.ZstdDecompressor().decompress(data)
        if raw[:1] == b"{":
            return None  # format 1 keeps none
        unpacker = msgpack.Unpacker(raw=False, max_buffer_size=len(raw))
        unpacker.feed(raw)
        found: dict[str, Any] = {}
        for _ in range(unpacker.read_map_header()):
            key = unpacker.unpack()
            if key in ("format", "version", "fragments"):
                found[key] = unpacker.unpack()
            else:
                unpacker.skip()
    except (zstandard.ZstdError, ValueError, msgpack.UnpackException) as exc:
        raise StateFormatError(f"not a Strata state: {exc}") from exc
    kept = found.get("fragments")
    if found.get("format") != FORMAT or found.get("version") != snapshot.version or type(kept) is not dict:
        return None
    return Fragments(snapshot, dict(kept["nodes"]), dict(kept["jobs"]), dict(kept["hypernodes"]))


def _load(data: bytes) -> dict[str, Any]:
    try:
        raw = zstandard.ZstdDecompressor().decompress(data)
        doc = json.loads(raw) if raw[:1] == b"{" else msgpack.unpackb(raw, raw=False)
    except (zstandard.ZstdError, ValueError, msgpack.UnpackException) as exc:
        raise StateFormatError(f"not a Strata state: {exc}") from exc
    if type(doc) is not dict or doc.get("format") not in (FORMAT, JSON_FORMAT):
        found = doc.get("format") if type(doc) is dict else None
        raise StateFormatError(f"state format {found!r}; this Strata reads formats {JSON_FORMAT} and {FORMAT}")
    return doc


def decode(data: bytes) -> CacheState:
    # Every object decoded lives on: the collector's passes over them would only cost (half the time).
    enabled = gc.isenabled()
    gc.disable()
    try:
        return _state(_load(data))
    finally:
        if enabled:
            gc.enable()


def _state(doc: dict[str, Any]) -> CacheState:
    config = FoldConfig(tuple(doc["config"]["schedulerNames"]), doc["config"]["defaultQueue"])
    state = CacheState(config)
    state.version = doc["version"]
    pods = state.pods
    for (ns, name), v in doc["pods"]:
        pods[(ns, name)] = _pod_view(v)
    state.pod_uids = {pod.uid: key for key, pod in pods.items()}
    uids = state.pod_uids
    state.tasks.load((uid, pods[uids[uid]] if task is None else _pod_view(task)) for uid, task in doc["tasks"])
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
    if "fragments" in doc:
        fragments = doc["fragments"]
        state.rendered = Fragments(
            state.snapshot(), dict(fragments["nodes"]), dict(fragments["jobs"]), dict(fragments["hypernodes"])
        )
    return state


def _requirements(rows: Iterable[Sequence[Any]] | None) -> kinds.Requirements | None:
    return None if rows is None else tuple((key, op, tuple(values)) for key, op, values in rows)


_STATUS_FIELD = kinds.PodView._fields.index("status")


def _pod_view(fields: list[Any]) -> kinds.PodView:
    fields[_STATUS_FIELD] = _STATUS[fields[_STATUS_FIELD]]  # the bytes hold the text; the fold, the type
    return kinds.PodView._make(fields)
