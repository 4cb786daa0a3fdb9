"""The audit on the real broker: `strata project` keeps the index; history, story, diff and
--at answer from it. Offsets are checked against a plain scan of the trace."""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from strata.ingest.from_trace import publish_trace
from strata.log.config import Settings
from strata.projector.fold.state import CacheState
from strata.projector.replay import fold_line
from strata.schemas.trace import SCHEDULER_RECORDS, split_lines
from tests.cli.test_cli import run
from tests.cli.test_log import env_of
from tests.paths import CONFORMANCE

pytestmark = pytest.mark.kafka
CONFORMANCE = CONFORMANCE
TRACE = CONFORMANCE / "c05.jsonl"


def scan(path: Path) -> list[dict[str, Any] | None]:
    out: list[dict[str, Any] | None] = []
    for line in path.read_bytes().split(b"\n"):
        if not line.strip(b" \t\r"):
            continue
        try:
            value = json.loads(line)
        except ValueError:
            value = None
        out.append(value if isinstance(value, dict) else None)
    return out


def pod_offsets(records: list[dict[str, Any] | None], namespace: str, name: str) -> list[int]:
    """A plain scan: the pod's watch events, and scheduler records naming a uid it had."""
    uids: set[str] = set()
    offsets = []
    for offset, r in enumerate(records):
        if r is None:
            continue
        obj = r.get("object")
        if r.get("type") in ("ADDED", "MODIFIED", "DELETED") and isinstance(obj, dict):
            meta = obj.get("metadata") or {}
            if obj.get("kind") == "Pod" and (meta.get("namespace"), meta.get("name")) == (namespace, name):
                offsets.append(offset)
                if isinstance(meta.get("uid"), str):
                    uids.add(meta["uid"])
        elif r.get("type") in SCHEDULER_RECORDS and r.get("pod") in uids:
            offsets.append(offset)
    return offsets


@pytest.fixture
def projected(kafka: Settings, tmp_path: Path) -> dict[str, str]:
    env = {**env_of(kafka), "STRATA_DB_URL": f"sqlite:///{tmp_path / 'c.db'}"}
    publish_trace(kafka, TRACE)
    out = run("project", "--stop-at-end", env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    return env


def _json(args: list[str], env: dict[str, str]) -> Any:
    out = run(*args, "-o", "json", env=env, timeout=60)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_pod_histories_match_a_plain_scan(projected: dict[str, str]):
    records = scan(TRACE)
    pods = Counter(
        (r["object"]["metadata"].get("namespace"), r["object"]["metadata"].get("name"))
        for r in records
        if r
        and isinstance(r.get("object"), dict)
        and r["object"].get("kind") == "Pod"
        and isinstance(r["object"].get("metadata"), dict)
    )
    busiest = [p for p, _ in pods.most_common(8) if all(isinstance(x, str) for x in p)]
    assert busiest
    for ns, name in busiest:
        items = _json(["history", "pod", f"{ns}/{name}"], projected)
        assert [i["offset"] for i in items] == pod_offsets(records, ns, name), (ns, name)
        for item in items:
            assert {"offset", "time", "type"} <= set(item)
            if item["type"] == "BIND":
                assert item["outcome"] in ("admitted", "rejected")
                assert ("reason" in item) == (item["outcome"] == "rejected")


def test_history_bounds_story_and_node(projected: dict[str, str]):
    records = scan(TRACE)
    binds = [(o, r) for o, r in enumerate(records) if r and r.get("type") == "BIND"]
    offset, bind = binds[len(binds) // 2]
    node_items = _json(["history", "node", bind["node"]], projected)
    assert offset in [i["offset"] for i in node_items]
    pod_items = _json(["history", "node", bind["node"], "--since", str(offset), "--until", str(offset)], projected)
    assert [i["offset"] for i in pod_items] == [offset]
    job = next(i for i in _json(["history", "pod", f"{_pod_of(records, bind['pod'])}"], projected) if i.get("uid"))
    annotations = (job.get("changes") or {}).get("annotations", [None, {}])[1] or {}
    group = annotations.get("scheduling.k8s.io/group-name")
    if group:
        story = run("story", "job", f"{job['namespace']}/{group}", env=projected)
        assert story.returncode == 0 and "bind of" in story.stdout and story.stdout.rstrip().endswith(".")


def _pod_of(records: list[dict[str, Any] | None], uid: str) -> str:
    for r in records:
        if r and isinstance(r.get("object"), dict) and (r["object"].get("metadata") or {}).get("uid") == uid:
            return f"{r['object']['metadata']['namespace']}/{r['object']['metadata']['name']}"
    raise AssertionError(uid)


def test_diff_shows_an_admitted_bind(projected: dict[str, str]):
    state = CacheState()
    admitted = None
    for offset, (_, line) in enumerate(split_lines(TRACE.read_bytes())):
        outcome = fold_line(state, line)
        if b'"BIND"' in line and outcome.result == "applied" and offset > 100:
            record = json.loads(line)
            if (
                record.get("type") == "BIND" and state.tasks[record["pod"]].job in state.snapshot().to_json()["jobs"]
            ):  # a job the snapshot shows
                admitted = offset
                break
    assert admitted is not None
    d = _json(["diff", str(admitted - 1), str(admitted)], projected)
    assert (d["from"], d["to"]) == (admitted, admitted + 1)
    changed = d["tasks"]["changed"]
    assert len(changed) == 1 and next(iter(changed.values()))["status"] == ["Pending", "Binding"]
    (node,) = d["nodes"]["changed"].values()
    assert node["used"] and all(node["idle"][k] == -v for k, v in node["used"].items() if k in node["idle"])
    same = run("diff", "5", "5", env=projected)
    assert same.returncode == 0 and "no change" in same.stdout


def test_snapshot_at_a_time(kafka: Settings, tmp_path: Path):
    env = {**env_of(kafka), "STRATA_DB_URL": f"sqlite:///{tmp_path / 'c.db'}"}
    first = publish_trace(kafka, CONFORMANCE / "c01.jsonl")
    time.sleep(1.1)
    between = time.time()
    time.sleep(1.1)
    publish_trace(kafka, CONFORMANCE / "c02.jsonl")
    moment = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(between)) + f".{int(between % 1 * 1000):03d}Z"
    at = run("snapshot", "--at", moment, "--digest", env=env)
    by_offset = run("snapshot", "--at-offset", str(first.last_offset), "--digest", env=env)
    assert at.returncode == 0, at.stderr
    assert at.stdout == by_offset.stdout
    before = run("snapshot", "--at", "2001-01-01T00:00:00Z", "-o", "json", env=env)
    assert json.loads(before.stdout)["version"] == 0
    bad = run("snapshot", "--at", "yesterday", env=env)
    assert bad.returncode == 1 and bad.stderr.count("\n") == 1 and "ISO-8601" in bad.stderr


def test_the_index_project_leaves_is_a_plain_folds_byte_for_byte(kafka: Settings, tmp_path: Path):
    """`strata project` reads BINDs and BIND_SUCCEEDEDs as a few fields and watch events without
    records, the pod contexts taken on the way: its index is the one a plain fold of the records
    ``read`` gives (``audit.context`` before each, ``AuditIndex.write`` of them all), byte for byte."""
    import io

    from strata.dev.gen import generate
    from strata.log.cachelog import CacheLogReader
    from strata.projector.auditindex.store import AuditIndex, Records
    from strata.projector.auditindex.writer import value_of
    from strata.projector.checkpoints.interface import LogIdentity
    from strata.projector.checkpoints.sql import SqlCheckpointStore
    from strata.projector.fold import auditentries as audit
    from tests.projector.auditindex.test_store import _stored

    trace = tmp_path / "generated.jsonl"
    out = io.BytesIO()
    generate(out, nodes=30, pods=600, seed=3)
    trace.write_bytes(out.getvalue())
    publish_trace(kafka, trace)
    env = {**env_of(kafka), "STRATA_DB_URL": f"sqlite:///{tmp_path / 'p.db'}"}
    done = run("project", "--stop-at-end", env=env, timeout=300)
    assert done.returncode == 0, done.stderr

    state = CacheState()
    kept, subjects, types = [], [], Counter()
    for entry in CacheLogReader(kafka).read():
        ctx = audit.context(state, entry.record)
        outcome = state.apply_at(entry.offset, entry.record)
        kept.append(audit.Kept(entry.offset, entry.timestamp_ms, value_of(entry), outcome, ctx))
        subjects.append(audit.subjects(entry.record, ctx, state.last_object))
        types[entry.record.TYPE] += 1
    assert types["BIND"] > 100 and types["BIND_SUCCEEDED"] > 100
    once = SqlCheckpointStore(f"sqlite:///{tmp_path / 'once.db'}")
    projected = SqlCheckpointStore(env["STRATA_DB_URL"])
    try:
        AuditIndex(once.engine).write(LogIdentity("t", "c", "f"), Records.of(kept, subjects), state.version)
        assert _stored(projected) == _stored(once)
    finally:
        once.close()
        projected.close()
