"""HyperNode trees, level-based over the stored objects (cache-semantics.md, section 7).

Volcano settles membership by event order and Go map order; here a snapshot's hypernodes are a
function of the stored HyperNodes and Nodes alone, computed when the snapshot is rendered.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from functools import lru_cache
from typing import NamedTuple

from projector.kinds import HyperNodeView, Member, Requirements


class HyperNodeEntry(NamedTuple):
    tier: int
    tier_name: str
    parent: str
    children: list[str]
    nodes: list[str]


@lru_cache(maxsize=1024)
def _compiled(pattern: str) -> re.Pattern[str] | None:
    try:
        return re.compile(pattern)
    except (re.error, RecursionError, OverflowError):
        return None


def _selects(requirements: Requirements, labels: Mapping[str, str]) -> bool:
    for key, op, values in requirements:
        present = key in labels
        if op == "In":
            ok = present and labels[key] in values
        elif op == "NotIn":
            ok = not present or labels[key] not in values
        elif op == "Exists":
            ok = present
        else:
            ok = not present
        if not ok:
            return False
    return True


def _own_nodes(members: Iterable[Member], nodes: Mapping[str, Mapping[str, str]]) -> set[str]:
    """The Node members of one HyperNode; ``nodes`` maps each stored node to its labels."""
    out: set[str] = set()
    for m in members:
        if m.type != "Node":
            continue
        if m.exact:
            out.add(m.exact)
        if m.regex:
            pattern = _compiled(m.regex)
            if pattern is not None:
                out.update(name for name in nodes if pattern.search(name))
        if m.labels:
            out.update(name for name, labels in nodes.items() if _selects(m.labels, labels))
    return out


def hypernode_entries(
    hypernodes: Mapping[str, HyperNodeView], nodes: Mapping[str, Mapping[str, str]]
) -> dict[str, HyperNodeEntry]:
    children = {
        name: sorted({m.exact for m in h.members if m.type == "HyperNode" and m.exact})
        for name, h in hypernodes.items()
    }
    parents: dict[str, str] = {}
    for name in sorted(hypernodes):
        for child in children[name]:
            if child != name and child not in parents:
                parents[child] = name
    own = {name: _own_nodes(h.members, nodes) for name, h in hypernodes.items()}
    entries = {}
    for name, h in hypernodes.items():
        found: set[str] = set()
        seen = {name}
        stack = [name]
        while stack:  # own nodes plus those of every stored descendant, each visited once
            current = stack.pop()
            found |= own[current]
            for child in children[current]:
                if child in hypernodes and child not in seen:
                    seen.add(child)
                    stack.append(child)
        entries[name] = HyperNodeEntry(h.tier, h.tier_name, parents.get(name, ""), children[name], sorted(found))
    return entries
