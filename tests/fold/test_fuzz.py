"""Malformed input never crashes the codec or the fold, is a bad record, and disturbs nothing.

Pure: no Kafka. Every input below is malformed in one way (docs/log.md, "Bad input"):

* the codec (``schemas.decode``) raises only ``CodecError`` subclasses, for every truncation of a
  valid message, unknown fingerprints, random bytes behind a valid header, flipped bytes;
* the fold (``fold_line`` for trace lines, ``CacheState.apply`` for log records) never raises,
  answers an ``Outcome``, counts exactly one version, and says "bad" for the malformed;
* good records with poison interleaved fold to exactly the snapshot of the good records with a
  bad record (``apply_bad``) in each poison's place.

``COUNTS`` tallies the malformed inputs by kind; ``pytest -s`` prints it at the end. A run of the
whole module must feed at least ``FLOOR`` of them (the last test): a change that stops feeding
inputs fails instead of passing on fewer.
"""

from __future__ import annotations

import copy
import json
import re
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from strata.projector.auditindex.store import _SUMMARY
from strata.projector.fold import auditentries as audit
from strata.projector.fold.state import CacheState, Outcome
from strata.projector.replay import fold_line
from strata.schemas import (
    BadRecord,
    Bind,
    BindFailed,
    CodecError,
    EncodeError,
    EvictFailed,
    MalformedBody,
    NotSingleObject,
    Synced,
    UnknownFingerprint,
    WatchEvent,
    decode,
    default_catalog,
    encode,
    objectjson,
)
from strata.schemas.codec import MARKER
from strata.schemas.objectjson import MAX_DEPTH, NumberLiteral
from strata.schemas.trace import BadLine, parse_line, split_lines
from tests.paths import CONFORMANCE

CONFORMANCE = CONFORMANCE
GOOD_LINES = [line for _, line in split_lines((CONFORMANCE / "c04.jsonl").read_bytes())]
PRIMER = GOOD_LINES[:80]  # nodes, queues, groups and pods: poison meets a populated state
RESULTS = frozenset({"applied", "ignored", "rejected", "bad"})
COUNTS: Counter[str] = Counter()
# A whole run feeds 25,519 to 25,858 (five runs): 21,330 every time (14,423 truncations of the
# sample messages, 6,800 hypothesis examples counted one each, 107 fixed cases), the rest as the
# draws fall (wrong JSON types, mutated lines, poison lists). The floor is docs/faults.md's claim.
FLOOR = 25_000
RAN: set[str] = set()  # the test functions that ran (any of their parameters) in this process
FAILED_BEFORE: list[int] = []  # the session's failures when this module started
# a failing example of a 1,000-record fold is long; hypothesis says so on every draw of one
pytestmark = pytest.mark.filterwarnings("ignore:Generating overly large repr")


def fuzz(n: int) -> Any:
    return settings(
        max_examples=n,
        deadline=None,
        database=None,  # no .hypothesis/ directory in the checkout
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example],
    )


@pytest.fixture(scope="module", autouse=True)
def _tally(request: pytest.FixtureRequest) -> Iterator[None]:
    FAILED_BEFORE.append(request.session.testsfailed)
    yield
    print(f"\nmalformed inputs: {sum(COUNTS.values())} {dict(sorted(COUNTS.items()))}")


@pytest.fixture(autouse=True)
def _ran(request: pytest.FixtureRequest) -> None:
    RAN.add(request.node.originalname)


def primed() -> CacheState:
    state = CacheState()
    for line in PRIMER:
        fold_line(state, line)
    return state


def fold_one(state: CacheState, line: bytes) -> Outcome:
    before = state.version
    try:
        record = parse_line(line, "fuzz")
    except BadLine:
        record = None
    ctx = audit.context(state, record) if record is not None else None
    outcome = fold_line(state, line)
    assert isinstance(outcome, Outcome) and outcome.result in RESULTS, outcome
    assert state.version == before + 1
    if record is not None:  # fold_line applies the line's parsed object, not ``record``: parse it alike
        _audited(state, record, outcome, ctx, _parsed(record))
    return outcome


def apply_one(state: CacheState, record: Any) -> Outcome:
    before = state.version
    ctx = audit.context(state, record)
    outcome = state.apply(record)
    assert isinstance(outcome, Outcome) and outcome.result in RESULTS, outcome
    assert state.version == before + 1
    _audited(state, record, outcome, ctx, state.last_object)
    return outcome


def _parsed(record: Any) -> Any:
    if not isinstance(record, WatchEvent):
        return None
    try:
        return objectjson.loads(record.object)
    except ValueError:
        return None


def _audited(state: CacheState, record: Any, outcome: Outcome, ctx: Any, obj: Any) -> None:
    """The record's audit entry can be kept and read back, under the subjects the fold gave it
    (``strata project`` keeps one for every record it reads from the log: one the log can hold)."""
    subjects = audit.subjects(record, ctx, obj)
    try:
        value = encode(record)
    except EncodeError:
        return  # no log holds it
    entry = audit.described(audit.Kept(state.version - 1, 0, value, outcome, ctx))
    assert entry.subjects == subjects
    assert isinstance(_SUMMARY(entry.summary), str)


def watch(obj: Any, op: str = "ADDED") -> bytes:
    return objectjson.dumps({"type": op, "object": obj})


def event(obj_bytes: bytes, op: str = "ADDED") -> WatchEvent:
    return WatchEvent(op=op, api_version="v1", kind="Pod", name="p", namespace="ns", source="fuzz", object=obj_bytes)


class Lockstep:
    """Two folds fed the same lines: by `strata replay` (``fold_line``) and as published (the
    record ``parse_line`` makes, through the codec, ``CacheState.apply``). They must agree on
    every verdict, so they stay equal; both start from a populated state and live across
    examples (building a fresh one per example would cost most of the test's time)."""

    def __init__(self) -> None:
        self.replay = primed()
        self.log = primed()

    def check(self, line: bytes) -> Outcome:
        outcome = fold_one(self.replay, line)
        record = parse_line(line, "fuzz")
        again = decode(encode(record))  # never an EncodeError: `strata ingest` would stop on it
        assert again == record
        published = apply_one(self.log, again)
        assert published.result == outcome.result, (line[:200], outcome, published)
        return outcome


LOCKSTEP = Lockstep()
SCRATCH = primed()  # records that happen to decode from random bytes land here


def assert_bad_everywhere(line: bytes) -> None:
    """A malformed trace line is bad in replay and in its published form."""
    assert LOCKSTEP.check(line).result == "bad", line[:200]


# --------------------------------------------------------------------------------------- codec
def _sample_records() -> list[Any]:
    records = [parse_line(line, "c04") for line in GOOD_LINES[::25]]
    records += [
        Bind(pod="uid-1", node="node-1", replica="r1", extensions={"k": "v"}),
        BindFailed(pod="uid-1", reason="gone", bind_offset=7),
        EvictFailed(pod="uid-2", reason=None, evict_offset=3),
        Synced(kind="Pod"),
        BadRecord(raw=b"\xff{", error="not JSON", source="trace/x:1"),
    ]
    return records


SAMPLES = [encode(r) for r in _sample_records()]
VERSIONS = default_catalog().all_versions()
FINGERPRINTS = frozenset(v.fingerprint for v in VERSIONS)


def test_every_truncation_of_a_valid_message_is_a_codec_error():
    for message in SAMPLES:
        for cut in range(len(message)):
            with pytest.raises(CodecError):
                decode(message[:cut])
            COUNTS["codec: truncated message"] += 1
    with pytest.raises(MalformedBody):
        decode(SAMPLES[0] + b"\x00")  # one trailing byte
    COUNTS["codec: trailing bytes"] += 1


@fuzz(500)
@given(fp=st.binary(min_size=8, max_size=8), body=st.binary(max_size=64))
def test_an_unknown_fingerprint_is_named(fp, body):
    COUNTS["codec: unknown fingerprint"] += 1
    if fp in FINGERPRINTS:
        return
    with pytest.raises(UnknownFingerprint):
        decode(MARKER + fp + body)


@fuzz(500)
@given(data=st.binary(max_size=64))
def test_bytes_without_the_marker_are_not_single_object(data):
    COUNTS["codec: no single-object marker"] += 1
    if data[:2] == MARKER:
        return
    with pytest.raises(NotSingleObject):
        decode(data)


def _decoded_or_codec_error(message: bytes) -> Any:
    try:
        return decode(message)
    except CodecError:
        return None


@fuzz(1500)
@given(version=st.sampled_from(VERSIONS), body=st.binary(max_size=200))
def test_random_bytes_after_a_valid_header(version, body):
    COUNTS["codec: random body after a valid header"] += 1
    record = _decoded_or_codec_error(MARKER + version.fingerprint + body)
    if record is not None and record.SCHEMA.startswith("strata.log."):  # it happened to decode: fold it
        apply_one(SCRATCH, record)


@fuzz(1000)
@given(data=st.data())
def test_flipped_bytes_of_valid_messages(data):
    message = bytearray(data.draw(st.sampled_from(SAMPLES)))
    for _ in range(data.draw(st.integers(1, 4))):
        message[data.draw(st.integers(0, len(message) - 1))] = data.draw(st.integers(0, 255))
    COUNTS["codec: flipped bytes"] += 1
    record = _decoded_or_codec_error(bytes(message))
    if record is not None and record.SCHEMA.startswith("strata.log."):
        apply_one(SCRATCH, record)


# ---------------------------------------------------------------------------- objects, by kind
BASES: dict[str, dict[str, Any]] = {
    "Pod": {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "p-fuzz",
            "namespace": "ns-fuzz",
            "uid": "uid-fuzz",
            "resourceVersion": "1",
            "labels": {"l": "v"},
            "annotations": {"a": "v", "scheduling.k8s.io/group-name": "pg-fuzz"},
        },
        "spec": {
            "schedulerName": "volcano",
            "nodeName": "",
            "priority": 1,
            "containers": [{"name": "c", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}],
            "initContainers": [{"name": "i", "resources": {"requests": {"cpu": "2"}}}],
            "resources": {"requests": {"cpu": "1"}},
            "overhead": {"cpu": "100m"},
        },
        "status": {"phase": "Pending"},
    },
    "Node": {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "n-fuzz", "labels": {"l": "v"}, "annotations": {"a": "v"}},
        "spec": {"unschedulable": False, "taints": [{"key": "k", "value": "v", "effect": "NoSchedule"}]},
        "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"}, "capacity": {"cpu": "4"}},
    },
    "PodGroup": {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": "pg-fuzz", "namespace": "ns-fuzz", "uid": "pg-uid", "resourceVersion": "1"},
        "spec": {"minMember": 1, "minTaskMember": {"t": 1}, "queue": "default", "priorityClassName": "high"},
        "status": {"phase": "Running"},
    },
    "Queue": {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "Queue",
        "metadata": {"name": "q-fuzz", "resourceVersion": "1"},
        "spec": {
            "weight": 1,
            "priority": 0,
            "reclaimable": True,
            "parent": "root",
            "capability": {"cpu": "10"},
            "deserved": {"cpu": "5"},
            "guarantee": {"resource": {"cpu": "1"}},
        },
        "status": {"state": "Open"},
    },
    "PriorityClass": {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": "pc-fuzz"},
        "value": 10,
        "globalDefault": False,
    },
    "CSINode": {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "CSINode",
        "metadata": {"name": "n-fuzz"},
        "spec": {"drivers": [{"name": "ebs.csi.aws.com", "allocatable": {"count": 25}}]},
    },
    "HyperNode": {
        "apiVersion": "topology.volcano.sh/v1alpha1",
        "kind": "HyperNode",
        "metadata": {"name": "hn-fuzz"},
        "spec": {
            "tier": 1,
            "tierName": "rack",
            "members": [{"type": "Node", "selector": {"exactMatch": {"name": "n"}}}],
        },
    },
}
_META = [
    (("metadata",), "object"),
    (("metadata", "name"), "string"),
    (("metadata", "resourceVersion"), "string"),
    (("metadata", "deletionTimestamp"), "string"),
    (("metadata", "labels"), "object"),
    (("metadata", "labels", "l"), "string"),
    (("metadata", "annotations"), "object"),
    (("metadata", "annotations", "a"), "string"),
]
# Every field the fold reads and types (cache-semantics.md section 1, "Types"), by kind.
TYPED: list[tuple[str, tuple[Any, ...], str]] = [
    *((kind, path, t) for kind in BASES for path, t in _META),
    *(
        ("Pod", path, t)
        for path, t in [
            (("metadata", "namespace"), "string"),
            (("metadata", "uid"), "string"),
            (("spec",), "object"),
            (("status",), "object"),
            (("spec", "priority"), "integer"),
            (("spec", "schedulerName"), "string"),
            (("spec", "nodeName"), "string"),
            (("status", "phase"), "string"),
            (("spec", "containers"), "array"),
            (("spec", "containers", 0), "object"),
            (("spec", "containers", 0, "resources"), "object"),
            (("spec", "containers", 0, "resources", "requests"), "object"),
            (("spec", "initContainers"), "array"),
            (("spec", "initContainers", 0), "object"),
            (("spec", "initContainers", 0, "resources", "requests"), "object"),
            (("spec", "resources"), "object"),
            (("spec", "resources", "requests"), "object"),
            (("spec", "overhead"), "object"),
        ]
    ),
    *(
        ("Node", path, t)
        for path, t in [
            (("spec",), "object"),
            (("status",), "object"),
            (("spec", "unschedulable"), "boolean"),
            (("spec", "taints"), "array"),
            (("spec", "taints", 0), "object"),
            (("spec", "taints", 0, "key"), "string"),
            (("spec", "taints", 0, "value"), "string"),
            (("spec", "taints", 0, "effect"), "string"),
            (("status", "allocatable"), "object"),
            (("status", "capacity"), "object"),
        ]
    ),
    *(
        ("PodGroup", path, t)
        for path, t in [
            (("metadata", "namespace"), "string"),
            (("metadata", "uid"), "string"),
            (("spec",), "object"),
            (("status",), "object"),
            (("spec", "minMember"), "integer"),
            (("spec", "minTaskMember"), "object"),
            (("spec", "minTaskMember", "t"), "integer"),
            (("spec", "queue"), "string"),
            (("spec", "priorityClassName"), "string"),
            (("status", "phase"), "string"),
        ]
    ),
    *(
        ("Queue", path, t)
        for path, t in [
            (("spec",), "object"),
            (("status",), "object"),
            (("spec", "weight"), "integer"),
            (("spec", "priority"), "integer"),
            (("spec", "reclaimable"), "boolean"),
            (("spec", "parent"), "string"),
            (("status", "state"), "string"),
            (("spec", "capability"), "object"),
            (("spec", "deserved"), "object"),
            (("spec", "guarantee"), "object"),
            (("spec", "guarantee", "resource"), "object"),
        ]
    ),
    ("PriorityClass", ("value",), "integer"),
    ("PriorityClass", ("globalDefault",), "boolean"),
    *(
        ("CSINode", path, t)
        for path, t in [
            (("spec",), "object"),
            (("spec", "drivers"), "array"),
            (("spec", "drivers", 0), "object"),
            (("spec", "drivers", 0, "name"), "string"),
            (("spec", "drivers", 0, "allocatable"), "object"),
            (("spec", "drivers", 0, "allocatable", "count"), "integer"),
        ]
    ),
    *(
        ("HyperNode", path, t)
        for path, t in [
            (("spec",), "object"),
            (("spec", "tier"), "integer"),
            (("spec", "tierName"), "string"),
            (("spec", "members"), "array"),
            (("spec", "members", 0), "object"),
        ]
    ),
]
_OF_TYPE = {"integer": int, "boolean": bool, "string": str, "object": dict, "array": list}
JSON_VALUES = st.one_of(
    st.integers(-(2**70), 2**70),
    st.booleans(),
    st.text(max_size=20),
    st.builds(NumberLiteral, st.sampled_from(["1.5", "1e3", "-0.0", "2.50", "1E-2", "0.0"])),
    st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=5), st.text(max_size=5), max_size=3),
)
# A quantity's place in each kind: every entry of these maps is parsed (cache-semantics.md 1).
QUANTITY_MAPS: list[tuple[str, tuple[Any, ...]]] = [
    ("Pod", ("spec", "containers", 0, "resources", "requests")),
    ("Pod", ("spec", "initContainers", 0, "resources", "requests")),
    ("Pod", ("spec", "resources", "requests")),
    ("Pod", ("spec", "overhead")),
    ("Node", ("status", "allocatable")),
    ("Node", ("status", "capacity")),
    ("Queue", ("spec", "capability")),
    ("Queue", ("spec", "deserved")),
    ("Queue", ("spec", "guarantee", "resource")),
]
BAD_QUANTITIES: list[Any] = [
    "1.5.5",
    "1e999",
    "-1",
    "-0.001",
    "NaN",
    "Infinity",
    "",
    " ",
    ".",
    "1K",
    "1ki",
    "1e",
    "0x10",
    "1_000",
    "1 000",
    "\u0661\u0662",  # Arabic-Indic digits
    "\uff11\uff12",  # fullwidth digits
    "\u00b2",
    "\u00a01",
    "9" * 10_000,  # a 10,000-digit number
    "1e" + "9" * 5_000,  # an exponent of 5,000 digits (int() refuses more than 4,300)
    "9" * 10_000 + "e-9980",
    "10Ei",
    "9223372036854775808",  # memory above int64
    True,
    False,
    [],
    {},
    {"n": 1},
    ["1"],
    -1,
    NumberLiteral("1e999"),
    NumberLiteral("-1.5"),
    NumberLiteral("9" * 10_000),  # a 10,000-digit JSON number
    NumberLiteral("1e" + "9" * 5_000),
    NumberLiteral("1.5.5"),
]
QUANTITY_NAMES = ["cpu", "memory", "pods", "ephemeral-storage", "nvidia.com/gpu", "count/pods", "storage", "a/b/c"]
# The spec's grammar, written here independently of projector.fold.resources.
_QUANTITY_SPEC = re.compile(
    r"[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E|[eE][+-]?[0-9]+)?", re.ASCII
)


def put(obj: dict[str, Any], path: tuple[Any, ...], value: Any) -> dict[str, Any]:
    """A deep copy of ``obj`` with ``value`` at ``path`` (intermediate objects created)."""
    out = copy.deepcopy(obj)
    node: Any = out
    for step in path[:-1]:
        if isinstance(step, str) and step not in node:
            node[step] = {}
        node = node[step]
    node[path[-1]] = value
    return out


def test_the_bases_are_good():
    state = CacheState()
    for obj in BASES.values():
        assert fold_one(state, watch(obj)).result == "applied", obj["kind"]


@fuzz(2500)
@given(field=st.sampled_from(TYPED), value=JSON_VALUES)
def test_a_field_of_the_wrong_json_type_is_bad(field, value):
    kind, path, expected = field
    if type(value) is _OF_TYPE[expected]:
        return
    COUNTS["fold: wrong JSON type"] += 1
    assert_bad_everywhere(watch(put(BASES[kind], path, value)))


@pytest.mark.parametrize(
    ("kind", "path", "value"),
    [
        ("Pod", ("spec", "priority"), 2**31),
        ("Pod", ("spec", "priority"), -(2**31) - 1),
        ("CSINode", ("spec", "drivers", 0, "allocatable", "count"), -1),
        ("Pod", ("metadata", "name"), None),  # required
        ("Pod", ("metadata", "namespace"), None),
        ("Pod", ("metadata", "uid"), None),
        ("PodGroup", ("metadata", "namespace"), None),
        ("Pod", ("spec", "containers"), [5]),
        ("Node", ("spec", "taints"), ["NoSchedule"]),
        ("HyperNode", ("spec", "members"), [None, "x"]),
    ],
)
def test_values_out_of_range_and_missing_identities_are_bad(kind, path, value):
    COUNTS["fold: out of range or missing"] += 1
    assert_bad_everywhere(watch(put(BASES[kind], path, value)))


@fuzz(1500)
@given(
    place=st.sampled_from(QUANTITY_MAPS),
    name=st.sampled_from(QUANTITY_NAMES),
    quantity=st.one_of(
        st.sampled_from(BAD_QUANTITIES),
        st.text(max_size=12).filter(lambda t: not _QUANTITY_SPEC.fullmatch(t.strip(" \t\r\n"))),
    ),
)
def test_a_quantity_that_does_not_parse_is_bad(place, name, quantity):
    COUNTS["fold: bad quantity"] += 1
    kind, path = place
    assert_bad_everywhere(watch(put(BASES[kind], path, {"cpu": "1", name: quantity})))


@fuzz(300)
@given(quantity=st.from_regex(_QUANTITY_SPEC, fullmatch=True), name=st.sampled_from(QUANTITY_NAMES))
def test_any_quantity_of_the_grammar_never_crashes(quantity, name):
    """Good-looking quantities of any size: applied, or bad when out of range; never a crash."""
    COUNTS["fold: quantity of the grammar"] += 1
    outcome = LOCKSTEP.check(watch(put(BASES["Node"], ("status", "allocatable"), {name: quantity})))
    assert outcome.result in ("applied", "bad")


@pytest.mark.parametrize(
    "annotation",
    ["volcano.sh/task-priority", "volcano.sh/oversubscription-cpu", "volcano.sh/oversubscription-memory"],
)
@pytest.mark.parametrize(
    "text",
    [
        "1" * 5_000,
        "-" + "1" * 5_000,
        "0" * 5_000 + "5",
        "1" * 5_000 + "e-4990",
        "1e" + "9" * 5_000,
        "1e-" + "9" * 5_000,
    ],
)
def test_huge_numbers_in_annotations_never_crash(annotation, text):
    """These annotations are parsed leniently (no match: ignored), so the records stay good."""
    COUNTS["fold: huge number in an annotation"] += 1
    for kind in ("Pod", "Node"):
        obj = put(BASES[kind], ("metadata", "annotations", annotation), text)
        assert LOCKSTEP.check(watch(obj)).result == "applied"


# -------------------------------------------------------------------------------- deep nesting
def _objects(depth: int) -> list[tuple[str, str]]:
    """Kubernetes-ish objects that nest exactly ``depth`` levels deep, by where the depth is."""
    pod = json.dumps(BASES["Pod"])
    assert '"labels": {"l": "v"}' in pod and '"status": {' in pod
    return [
        ("labels", pod.replace('"labels": {"l": "v"}', f'"labels": {_nested(depth - 2)}')),
        ("unknown field", pod.replace('"status": {', f'"x": {_nested(depth - 1, "[")}, "status": {{')),
        ("unknown kind", f'{{"apiVersion":"v1","kind":"Foo","metadata":{{"name":"f"}},"x":{_nested(depth - 1)}}}'),
        ("arrays", _nested(depth, "[")),
    ]


def _nested(depth: int, bracket: str = "{") -> str:
    if bracket == "[":
        return "[" * depth + "]" * depth
    return '{"a":' * (depth - 1) + "{}" + "}" * (depth - 1)


def _watch_line(obj: str) -> bytes:
    return f'{{"type":"ADDED","object":{obj}}}'.encode()


@pytest.mark.parametrize("depth", [MAX_DEPTH + 1, 1_000, 10_000, 100_000])
def test_json_nested_too_deeply_is_bad_not_a_recursion_error(depth):
    for where, obj in _objects(depth):
        COUNTS["fold: deep nesting"] += 3
        assert_bad_everywhere(_watch_line(obj))  # a trace line
        assert apply_one(primed(), event(obj.encode())).result == "bad", where  # a published object
    COUNTS["fold: deep nesting"] += 1
    assert_bad_everywhere(_nested(depth).encode())  # the line itself


def _at_stack_depth(frames: int, fn: Any) -> Any:
    return fn() if frames == 0 else _at_stack_depth(frames - 1, fn)


def test_the_depth_limit_does_not_depend_on_the_callers_stack():
    """Nesting up to MAX_DEPTH parses even from a deep stack; one more level is bad from any."""
    for where, obj in _objects(MAX_DEPTH - 1):
        ok, too_deep = _watch_line(obj), _watch_line(dict(_objects(MAX_DEPTH))[where])
        for frames in (0, 250):
            # (deep labels are bad for their type, not their depth)
            assert "nests deeper" not in _at_stack_depth(frames, lambda ok=ok: fold_one(CacheState(), ok)).reason
            assert "nests deeper" in _at_stack_depth(frames, lambda bad=too_deep: fold_one(CacheState(), bad)).reason
            COUNTS["fold: deep nesting"] += 1


# ------------------------------------------------------------------------------- huge strings
@pytest.mark.parametrize("size", [1 << 20, 4 << 20])
def test_huge_strings_never_crash(size):
    big = "x" * size
    cases = [
        put(BASES["Pod"], ("metadata", "annotations", "a"), big),
        put(BASES["Pod"], ("metadata", "labels", big), "v"),
        put(BASES["Node"], ("metadata", "name"), big),
        put(BASES["Node"], ("status", "allocatable"), {big: "1"}),
        put(BASES["Node"], ("status", "allocatable"), {"cpu": "1" * size}),  # out of range
        put(BASES["Queue"], ("spec", "capability"), {"cpu": big}),  # does not parse
    ]
    lines = [watch(obj) for obj in cases] + [
        objectjson.dumps({"type": "BIND", "pod": big, "node": big}),
        objectjson.dumps({"type": "SYNCED", "kind": big}),
        b'{"type":"BIND","pod":"' + b"\xff" * size + b'"}',
    ]
    for line in lines:
        COUNTS["fold: huge string"] += 1
        LOCKSTEP.check(line)


# --------------------------------------------------------------------------------- trace lines
@fuzz(1500)
@given(line=st.binary(min_size=1, max_size=300))
def test_random_bytes_as_a_trace_line(line):
    COUNTS["trace: random bytes"] += 1
    outcome = LOCKSTEP.check(line)
    try:
        line.decode("utf-8")
    except UnicodeDecodeError:
        assert outcome.result == "bad"


@fuzz(1500)
@given(data=st.data())
def test_mutated_good_lines(data):
    """Cuts, inserted bytes (invalid UTF-8 too), replaced and deleted bytes of real records."""
    line = bytearray(data.draw(st.sampled_from(GOOD_LINES)))
    how = data.draw(st.sampled_from(["cut", "insert", "replace", "delete", "surrogate"]))
    at = data.draw(st.integers(0, len(line) - 1))
    if how == "cut":
        line = line[: max(at, 1)]
    elif how == "insert":
        line[at:at] = data.draw(st.binary(min_size=1, max_size=8))
    elif how == "replace":
        line[at] = data.draw(st.integers(0, 255))
    elif how == "delete":
        del line[at : at + data.draw(st.integers(1, 20))]
    else:
        line = bytearray(bytes(line).replace(b'"name":"', b'"name":"\\ud800', 1))
    if not line.strip(b" \t\r\n"):
        return
    COUNTS[f"trace: mutated line ({how})"] += 1
    outcome = LOCKSTEP.check(bytes(line))
    if how == "cut" or (how == "surrogate" and b"\\ud800" in line):
        assert outcome.result == "bad"


# -------------------------------------------------------------------------- poison interleaved
def _poison_objects() -> st.SearchStrategy[bytes]:
    """A watch event's object (JSON bytes) that is bad whatever state it meets."""
    typed = st.tuples(st.sampled_from(TYPED), JSON_VALUES).filter(lambda fv: type(fv[1]) is not _OF_TYPE[fv[0][2]])
    return st.one_of(
        st.binary(max_size=40).map(lambda b: b"\xff" + b),  # invalid UTF-8
        st.sampled_from(list(BASES.values())).flatmap(
            lambda obj: st.integers(1, len(objectjson.dumps(obj)) - 1).map(lambda n: objectjson.dumps(obj)[:n])
        ),
        typed.map(lambda fv: objectjson.dumps(put(BASES[fv[0][0]], fv[0][1], fv[1]))),
        st.tuples(st.sampled_from(QUANTITY_MAPS), st.sampled_from(BAD_QUANTITIES)).map(
            lambda pq: objectjson.dumps(put(BASES[pq[0][0]], pq[0][1], {"memory": pq[1]}))
        ),
        st.sampled_from([obj.encode() for where, obj in _objects(MAX_DEPTH + 1) if where != "unknown kind"]),
        st.sampled_from([b"[]", b"null", b'"x"', b"1", b"{"]),
    )


def _poison_lines() -> st.SearchStrategy[bytes]:
    """Trace lines that are bad whatever state they meet."""
    return st.one_of(
        _poison_objects().map(lambda obj: b'{"type":"ADDED","object":' + obj + b"}"),
        st.binary(max_size=40).map(lambda b: b"\xff" + b),  # invalid UTF-8
        st.sampled_from(GOOD_LINES).flatmap(lambda g: st.integers(1, len(g) - 1).map(lambda n: g[:n])),
        st.sampled_from([b"[]", b"null", b'"x"', b'{"type":"BINDX"}', b'{"type":{}}', b'{"type":"BIND","pod":1}']),
    )


def _bad_messages() -> st.SearchStrategy[bytes]:
    """Kafka messages that a reader turns into a BadRecord (or that decode into a bad record)."""
    return st.one_of(
        st.sampled_from(SAMPLES).flatmap(lambda m: st.integers(0, len(m) - 1).map(lambda n: m[:n])),
        st.binary(max_size=40).filter(lambda b: b[:2] != MARKER),
        st.tuples(st.binary(min_size=8, max_size=8), st.binary(max_size=40))
        .filter(lambda fb: fb[0] not in FINGERPRINTS)
        .map(lambda fb: MARKER + fb[0] + fb[1]),
        _poison_objects().map(lambda obj: encode(event(obj))),  # a WatchEvent whose object is garbage
    )


def _reader_record(message: bytes) -> Any:
    """What CacheLogReader._decode makes of a message, without Kafka."""
    try:
        return decode(message)
    except CodecError as exc:
        return BadRecord(raw=message, error=str(exc), source="fuzz")


def _compare(good: list[Any], poison: list[Any], positions: list[int], fold: Any) -> None:
    mixed, reference = CacheState(), CacheState()
    slots = sorted(zip(positions, range(len(poison)), strict=True))
    k = 0
    for i, item in enumerate([*good, None]):
        while k < len(slots) and slots[k][0] == i:
            assert fold(mixed, poison[slots[k][1]]).result == "bad"
            reference.apply_bad("poison")
            k += 1
        if item is not None:
            fold(mixed, item)
            fold(reference, item)
    assert mixed.version == reference.version == len(good) + len(poison)
    assert mixed.snapshot().canonical_bytes() == reference.snapshot().canonical_bytes()


@fuzz(40)
@given(data=st.data())
def test_poison_lines_never_disturb_good_ones(data):
    poison = data.draw(st.lists(_poison_lines(), min_size=5, max_size=80))
    positions = data.draw(st.lists(st.integers(0, len(GOOD_LINES)), min_size=len(poison), max_size=len(poison)))
    COUNTS["interleaved: poison lines"] += len(poison)
    _compare(GOOD_LINES, poison, positions, fold_one)


GOOD_RECORDS = [parse_line(line, "c04") for line in GOOD_LINES]


@fuzz(40)
@given(data=st.data())
def test_poison_messages_never_disturb_good_records(data):
    messages = data.draw(st.lists(_bad_messages(), min_size=5, max_size=80))
    positions = data.draw(st.lists(st.integers(0, len(GOOD_RECORDS)), min_size=len(messages), max_size=len(messages)))
    COUNTS["interleaved: poison messages"] += len(messages)
    _compare(GOOD_RECORDS, [_reader_record(m) for m in messages], positions, apply_one)


@settings(max_examples=300, deadline=None)
@given(
    digits=st.from_regex(r"[1-9][0-9]{0,1500}", fullmatch=True),
    multiplier=st.sampled_from([1, 1000, 1024, 1000 * 1024**3, 1024**6]),
    exponent=st.integers(-1600, 4),
)
def test_long_quantities_scale_exactly(digits: str, multiplier: int, exponent: int):
    """The linear-time path for long literals (decimal) agrees with exact rational arithmetic."""
    import math
    from fractions import Fraction

    from strata.projector.fold.resources import _ceil_scaled

    expected = math.ceil(Fraction(int(digits) * multiplier) * Fraction(10) ** exponent)
    assert _ceil_scaled(digits, multiplier, exponent) == expected


@pytest.mark.parametrize("limit", ["0", "640", "100000"])
def test_which_integers_are_bad_does_not_depend_on_the_environment(limit: str):
    """PYTHONINTMAXSTRDIGITS moves CPython's int/str limit; a reader's verdict must not move."""
    import os
    import subprocess
    import sys

    program = (
        "from strata.schemas import objectjson\n"
        "for n in (700, 4300, 4301):\n"
        "    try:\n"
        "        print(len(objectjson.dumps(objectjson.loads('[-' + '9' * n + ']'))))\n"
        "    except ValueError:\n"
        "        print('bad')\n"
    )
    env = {**os.environ, "PYTHONINTMAXSTRDIGITS": limit}
    out = subprocess.run([sys.executable, "-c", program], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["703", "4303", "bad"]


# ------------------------------------------------------------------------------ the count itself
def test_a_whole_run_feeds_at_least_the_floor_of_malformed_inputs(request: pytest.FixtureRequest):
    """Last: a regression that stops feeding inputs (a strategy that draws nothing, a test that
    returns early, lower max_examples) fails here. Only a whole run of the module counts: with
    -k, -m, a node id, xdist or a shuffled order some tests have not run in this process."""
    tests = {name for name, value in globals().items() if name.startswith("test_") and callable(value)}
    missing = tests - RAN
    if missing:
        pytest.skip(f"not a whole run of the module: {len(missing)} test functions did not run here")
    if request.session.testsfailed > FAILED_BEFORE[0]:
        pytest.skip("a test of the module failed: its count means nothing")
    fed = sum(COUNTS.values())
    assert fed >= FLOOR, (
        f"a whole run fed {fed:,} malformed inputs, fewer than {FLOOR:,}: {dict(sorted(COUNTS.items()))}"
    )
