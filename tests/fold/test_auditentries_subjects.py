"""What the audit keeps of a pod event is the fold's own view of it: its subjects, which the fold's
thread derives from the object it parsed (``audit.subjects``), are ``describe``'s, and its summary,
which a reader derives again from the stored bytes (``audit.described``), is the one the fold's
object gives, for pods of every shape."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from strata.projector.fold import auditentries as audit
from strata.projector.fold.state import CacheState
from strata.schemas import WatchEvent, encode
from tests.jsonvalues import LITERALS, json_values

GROUP = "scheduling.k8s.io/group-name"
ODD = json_values(LITERALS)
NAMES = st.sampled_from(["", "g", "pg-1", "ü"])


def _node() -> WatchEvent:
    obj = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}, "status": {"allocatable": {"cpu": "8"}}}
    return WatchEvent("ADDED", "v1", "Node", "n1", "t", json.dumps(obj).encode(), uid="n", resource_version="1")


def _pod(text: bytes, op: str = "ADDED") -> WatchEvent:
    return WatchEvent(op, "v1", "Pod", "p", "t", text, namespace="ns", uid="u", resource_version="2")


def _dumps(value: Any) -> bytes:
    return json.dumps(value, default=lambda n: n.text, ensure_ascii=False).encode("utf-8", "surrogatepass")


def assert_alike(text: bytes, op: str = "ADDED") -> None:
    state = CacheState()
    state.apply_at(0, _node())
    record = _pod(text, op)
    outcome = state.apply_at(1, record)
    seen = audit.AuditEntry(1, 0, record, outcome, None, audit.pod_fields(state.last_object))
    assert audit.subjects(record, None, state.last_object) == seen.subjects, (text, outcome)
    assert audit.described(audit.Kept(1, 0, encode(record), outcome, None)) == seen


annotations = st.one_of(ODD, st.dictionaries(st.sampled_from([GROUP, "a"]), st.one_of(NAMES, ODD), max_size=2))
metadata = st.one_of(
    ODD,
    st.fixed_dictionaries(
        {"name": st.just("p"), "namespace": st.just("ns"), "uid": st.just("u")},
        optional={"annotations": annotations, "deletionTimestamp": st.one_of(st.none(), st.text(max_size=3))},
    ),
)
spec = st.one_of(
    ODD,
    st.fixed_dictionaries(
        {"schedulerName": st.just("volcano")},
        optional={"nodeName": st.one_of(st.sampled_from(["", "n1", "n2"]), ODD), "containers": ODD},
    ),
)
pods = st.fixed_dictionaries(
    {"apiVersion": st.just("v1"), "kind": st.just("Pod")},
    optional={"metadata": metadata, "spec": spec, "status": ODD},
)


@settings(max_examples=400, deadline=None)
@given(pods, st.sampled_from(["ADDED", "MODIFIED", "DELETED"]))
def test_generated_pods(pod: dict[str, Any], op: str) -> None:
    assert_alike(_dumps(pod), op)


def test_odd_texts() -> None:
    """Duplicate keys, nesting deeper than the fold reads, a lone surrogate, an integer too long,
    no JSON at all: a reader's parse of the stored bytes agrees with the fold's."""
    meta = '"metadata":{"name":"p","namespace":"ns","annotations":{"' + GROUP + '":"g"}}'
    for text in (
        '{"kind":"Pod",' + meta + ',"spec":{"nodeName":"n1","nodeName":"n2"}}',
        '{"kind":"Pod",' + meta + ',"metadata":{"annotations":{"' + GROUP + '":"h"}},"spec":{"nodeName":"n1"}}',
        '{"kind":"Pod",' + meta + ',"spec":{"nodeName":"n1"},"deep":' + "[" * 600 + "]" * 600 + "}",
        '{"kind":"Pod",' + meta + ',"spec":{"nodeName":"\\ud800"}}',
        '{"kind":"Pod",' + meta + ',"spec":{"nodeName":"n1","x":' + "9" * 5000 + "}}",
        '{"kind":"Pod",' + meta + ',"spec":{"nodeName":"n1"}',
        '{"kind":"Pod",' + meta + ',"spec":{"nodeName":"n1"}} trailing',
        "[1, 2]",
        '{"kind":"Pod","metadata":null,"spec":null}',
        '{"kind":"Pod","metadata":{"annotations":null},"spec":{"nodeName":null}}',
    ):
        assert_alike(text.encode("utf-8", "surrogatepass"))
