"""HyperNode trees, level-based over the stored objects (cache-semantics.md, section 7).

Volcano settles membership by event order and Go map order; here a snapshot's hypernodes are a
function of the stored HyperNodes and Nodes alone, computed when the snapshot is rendered.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from functools import lru_cache
from typing import TYPE_CHECKING, Any, NamedTuple

import re2

from strata.projector.fold.kinds import HyperNodeView, Member, Requirements

if TYPE_CHECKING:
    # typeshed has stubs for re's private modules under their pre-3.11 names, which are the same modules
    import sre_constants as _c
    import sre_parse as _parser
else:
    from re import _constants as _c
    from re import _parser


class HyperNodeEntry(NamedTuple):
    tier: int
    tier_name: str
    parent: str
    children: list[str]
    nodes: list[str]


# A pattern comes from a HyperNode, which anyone allowed to write HyperNodes can create, and a
# backtracking engine lets one like (a+)+$ stall every replica's fold. The constructs the spec
# names mean the same in RE2 (Go's engine) and Python's re, so those patterns run on RE2, in linear
# time; one of them that RE2 refuses (a repeat count over 1000, a program too large) does not
# compile, as in Go. Anything else keeps Python's meaning, which the conformance traces pin down
# (edge-12: a lookahead selects nodes, though Go would refuse it); only such patterns backtrack.
_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.log_errors = False
_PLAIN = {
    _c.LITERAL,
    _c.NOT_LITERAL,
    _c.ANY,
    _c.IN,
    _c.AT,
    _c.BRANCH,
    _c.SUBPATTERN,
    _c.MAX_REPEAT,
    _c.MIN_REPEAT,
}
_PLAIN_AT = {_c.AT_BEGINNING, _c.AT_END}
_PLAIN_IN = {_c.LITERAL, _c.RANGE, _c.NEGATE}
# Text that parses alike but means different things: "{,n}" and "{01}" are repeats to Python and
# literal text to RE2; "[:" opens a POSIX class in RE2 only.
_DIFFERENT_TEXT = re.compile(r"\{,|[{,]0[0-9]|\[:")


def _plain(items: Iterable[tuple[Any, Any]]) -> bool:
    """Whether a parsed pattern uses only the constructs of the spec's common subset."""
    for op, arg in items:
        if op not in _PLAIN:
            return False
        if op is _c.AT and arg not in _PLAIN_AT:
            return False
        if op is _c.NOT_LITERAL and not _ascii(arg):
            return False
        if op is _c.IN and not all(o in _PLAIN_IN and (o is _c.NEGATE or _ascii(a)) for o, a in arg):
            return False
        if op is _c.BRANCH and not all(_plain(b) for b in arg[1]):
            return False
        if op is _c.SUBPATTERN and (arg[1] or arg[2] or not _plain(arg[3])):
            return False  # inline flags such as (?i) are not in the subset
        if op in (_c.MAX_REPEAT, _c.MIN_REPEAT) and not _plain(arg[2]):
            return False
    return True


def _ascii(arg: Any) -> bool:
    return all(c < 128 for c in (arg if isinstance(arg, tuple) else (arg,)))


class _Engine(NamedTuple):
    """How a pattern runs: ``re2`` (the common subset) or Python's ``re``, and its search."""

    re2: bool
    search: Callable[[str], object]


@lru_cache(maxsize=1024)
def _compiled(pattern: str) -> _Engine | None:
    """The engine of a pattern; None when it does not compile (it contributes nothing)."""
    try:
        parsed = _parser.parse(pattern)
        python = re.compile(pattern).search
    except (re.error, RecursionError, OverflowError):
        return None
    if parsed.state.flags & ~re.UNICODE or not _plain(parsed.data) or _DIFFERENT_TEXT.search(pattern):
        return _Engine(False, python)
    try:
        linear = re2.compile(pattern, _RE2_OPTIONS).search
    except re2.error:
        return None

    def search(name: str) -> object:
        # Python's $ also matches before a final newline, RE2's does not. No node name the API
        # server accepts holds a newline (names are DNS subdomains); one from a hand-made record
        # keeps Python's meaning.
        return python(name) if "\n" in name else linear(name)

    return _Engine(True, search)


@lru_cache(maxsize=64)
def _search_set(patterns: tuple[str, ...]) -> Any:
    """RE2's multi-pattern search over ``patterns`` (all in the common subset): one pass over a
    name finds every pattern that selects it. None when RE2 cannot build the set."""
    matcher = re2.Set.SearchSet(_RE2_OPTIONS)
    try:
        for pattern in patterns:
            matcher.Add(pattern)
        matcher.Compile()
    except re2.error:
        return None
    return matcher


def _regex_hits(patterns: Iterable[str], nodes: Iterable[str]) -> dict[str, set[str]]:
    """The node names each pattern selects. Matching every pattern against every name cost most
    of a snapshot's rendering at 5,000 nodes and 160 hypernodes: RE2 patterns go through one
    multi-pattern search per name, the others (and names RE2 would read otherwise) one by one."""
    hits: dict[str, set[str]] = {}
    linear: list[str] = []
    names = list(nodes)
    for pattern in sorted(set(patterns)):
        engine = _compiled(pattern)
        hits[pattern] = set()
        if engine is None:
            continue
        if engine.re2:
            linear.append(pattern)
        else:
            hits[pattern] = {name for name in names if engine.search(name)}
    matcher = _search_set(tuple(linear)) if linear else None
    if matcher is None:
        for pattern in linear:
            search = _compiled(pattern).search  # type: ignore[union-attr]
            hits[pattern] = {name for name in names if search(name)}
        return hits
    for name in names:
        if "\n" in name:
            found = [p for p in linear if _compiled(p).search(name)]  # type: ignore[union-attr]
        else:
            found = [linear[i] for i in matcher.Match(name) or ()]
        for pattern in found:
            hits[pattern].add(name)
    return hits


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


def _own_nodes(
    members: Iterable[Member], nodes: Mapping[str, Mapping[str, str]], regex_hits: Mapping[str, set[str]]
) -> set[str]:
    """The Node members of one HyperNode; ``nodes`` maps each stored node to its labels."""
    out: set[str] = set()
    for m in members:
        if m.type != "Node":
            continue
        if m.exact:
            out.add(m.exact)
        if m.regex:
            out |= regex_hits[m.regex]
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
    patterns = (m.regex for h in hypernodes.values() for m in h.members if m.type == "Node" and m.regex)
    regex_hits = _regex_hits(patterns, nodes)
    own = {name: _own_nodes(h.members, nodes, regex_hits) for name, h in hypernodes.items()}
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
