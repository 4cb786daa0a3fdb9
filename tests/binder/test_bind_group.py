"""BIND_GROUP end to end on the real broker: published from a trace, folded by `strata project`,
told by `strata story` and `strata history` with the group's verdict, and dispatched as one bind
command per pod of an admitted group."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from strata.log.config import Settings
from tests.cli.test_log import env_of
from tests.paths import CONFORMANCE

pytestmark = pytest.mark.kafka
STRATA = str(Path(sys.executable).with_name("strata"))
TRACE = CONFORMANCE / "edge-28-bind-group.jsonl"


def strata(env: dict[str, str], *args: str) -> str:
    done = subprocess.run([STRATA, *args], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_story_and_history_tell_each_group_and_its_verdict(kafka: Settings, tmp_path: Path) -> None:
    env = {**env_of(kafka), "STRATA_DB_URL": f"sqlite:///{tmp_path / 'cp.db'}"}
    strata(env, "ingest", "--from", str(TRACE))
    story = strata(env, "story", "job", "ns/g1")
    rejected = "gang bind of 3 pod(s) by replica r1 rejected, none placed: cpu does not fit on node n1"
    assert f"{rejected} (bind 3 of 3, pod u-a3)." in story, story
    assert "gang bind of 3 pod(s) by replica r1 admitted: a1 to n1, a2 to n1, a3 to n2." in story, story
    history = json.loads(strata(env, "history", "pod", "ns/c2", "-o", "json"))
    groups = [e for e in history if e["type"] == "BIND_GROUP"]
    assert [g["outcome"] for g in groups] == ["rejected", "admitted"], groups
    assert "node nX is not stored (bind 2 of 2, pod u-c2)" in groups[0]["reason"]
    assert {b["name"] for b in groups[1]["binds"]} == {"c1", "c2"}


def test_the_dispatcher_sends_one_command_per_pod_of_an_admitted_group(kafka: Settings, tmp_path: Path) -> None:
    import threading
    import time

    from strata.binder.dispatcher import Dispatcher
    from strata.log.topics import TopicNames
    from strata.projector.fold.state import CacheState, FoldConfig
    from strata.schemas import decode
    from tests.binder.support import read_topic

    env = {**env_of(kafka), "STRATA_DB_URL": f"sqlite:///{tmp_path / 'cp.db'}"}
    strata(env, "ingest", "--from", str(TRACE))
    stop = threading.Event()
    dispatcher = Dispatcher(kafka, FoldConfig(), stop, "t", state_at=lambda _offset: CacheState())
    thread = threading.Thread(target=dispatcher.run, daemon=True)
    thread.start()
    topic = TopicNames(kafka.topic_prefix).commands("bind")
    # groups of 3 (offset 15) and 2 (21), the plain BIND of b1 (22), a group of a2 alone (25)
    expected = sorted(["u-a1", "u-a2", "u-a3", "u-c1", "u-c2", "u-b1", "u-a2"])
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        commands = [decode(m.value()) for m in read_topic(kafka, topic)]
        if len(commands) >= len(expected):
            break
        time.sleep(0.5)
    stop.set()
    thread.join(30)
    assert sorted(c.pod_uid for c in commands) == expected
    assert len({c.command_id for c in commands}) == len(expected)  # one id per pod, even within a group
    group = [c for c in commands if c.log_offset == 15]
    assert sorted((c.pod_uid, c.node) for c in group) == [("u-a1", "n1"), ("u-a2", "n1"), ("u-a3", "n2")]
    assert {c.replica for c in group} == {"r1"}
