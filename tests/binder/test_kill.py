"""Crashes: `strata bind` killed with SIGKILL in the middle of a batch, and the dispatcher killed
mid-stream; each restarted with the same --instance. Exactly once, checked on the apiserver, in the
cache log and in the command topic."""
# ruff: noqa: F811 - pytest fixtures imported from tests.binder.support are parameters here

from __future__ import annotations

import signal
import subprocess
import time
from collections import Counter

import pytest

from strata.dev.faults import Verdict
from strata.dev.faults.binder_crash import repeated_calls
from strata.dev.faults.common import api_writes, env_for
from strata.log.cachelog import CacheLogWriter
from strata.log.topics import TopicNames
from strata.schemas import Bind, BindFailed, BindSucceeded
from tests.binder.support import (  # noqa: F401 - fixtures
    Env,
    check,
    decoded,
    env,
    eventually,
    ingest,
    quick_watches,
    read_topic,
)
from tests.cli.test_cli import STRATA

pytestmark = [pytest.mark.kafka, pytest.mark.kube]


def _start(env: Env, *args: str) -> subprocess.Popen[str]:
    proc = subprocess.Popen([STRATA, "bind", *args], env=env_for(env.settings), stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    line = proc.stderr.readline()
    assert line.startswith("bind: running"), line
    return proc


def _stop(proc: subprocess.Popen[str]) -> None:
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err


def _pods(env: Env, count: int) -> dict[str, str]:
    uids = {}
    for i in range(count):
        uids[f"p{i:03d}"] = env.pod(f"p{i:03d}")["metadata"]["uid"]
    eventually(lambda: check(len(env.log.tasks(env.ns)) == count))
    return uids


def test_sigkill_in_the_middle_of_a_batch_then_restart(env: Env, ingest):
    nodes = [env.node(f"n{i}") for i in range(4)]
    uids = _pods(env, 200)
    proc = _start(env, "--instance", "crash", "--workers", "1", "--threads", "1")  # slow: kill mid-batch
    try:
        writer = CacheLogWriter(env.settings)
        placement = {}
        for i, (name, uid) in enumerate(sorted(uids.items())):
            placement[name] = nodes[i % 4]
            writer.append(Bind(pod=uid, node=nodes[i % 4], replica="r1"))
        writer.flush()

        def some_bound() -> int:
            bound = sum(1 for p in env.pods().values() if p["spec"].get("nodeName"))
            assert bound >= 10, bound
            return bound

        at_kill = eventually(some_bound, every_s=0.05)
        proc.kill()  # SIGKILL: no chance to finish or abort anything
        proc.wait()
    finally:
        if proc.poll() is None:
            proc.kill()
    assert at_kill < 200, "the binder finished before the kill; nothing was tested"
    proc = _start(env, "--instance", "crash", "--workers", "1", "--threads", "8")
    try:
        eventually(lambda: check(len({r.pod for r in env.log.records(BindSucceeded, BindFailed)}) >= 200), timeout_s=45)
        bound = env.pods()
        assert {n: p["spec"].get("nodeName") for n, p in bound.items()} == placement
        eventually(lambda: check(all(t["status"] == "Bound" for t in env.log.tasks(env.ns).values())))
        time.sleep(1.0)  # anything duplicated would land by now
        outcomes = env.log.records(BindSucceeded, BindFailed)
        assert all(isinstance(r, BindSucceeded) for r in outcomes)
        # at least once: a batch whose outcomes were written just before the kill is redone and
        # writes them again, each naming its BIND (harmless to the fold); every pod has one
        assert set(Counter(r.pod for r in outcomes)) == set(uids.values())
        admitted_at = {e.record.pod: e.offset for e in env.log.admitted}
        assert all(r.bind_offset == admitted_at[r.pod] for r in outcomes)
        commands = decoded(read_topic(env.settings, TopicNames(env.settings.topic_prefix).commands("bind")))
        assert len(commands) == 200 and len({c.command_id for c in commands}) == 200
        assert {c.log_offset for c in commands} == {e.offset for e in env.log.admitted}
        # and at the API server: the redone batch read the pods first; no Binding was made twice
        writes, verdict = api_writes(env.settings, env.ns), Verdict()
        for name in uids:
            repeated_calls(verdict, writes.get(("binding", name), ()), name, "Binding", True)
        assert verdict.clean, verdict.problems
    finally:
        _stop(proc)


def test_dispatcher_killed_mid_stream_dispatches_each_admitted_bind_once(env: Env, ingest):
    nodes = [env.node("n0"), env.node("n1")]
    uids = sorted(_pods(env, 120).values())
    # --workers 0: the dispatcher (and idle retry tiers) only; no bind happens, pods stay Pending
    proc = _start(env, "--instance", "disp", "--workers", "0")
    topic = TopicNames(env.settings.topic_prefix).commands("bind")
    writer = CacheLogWriter(env.settings)
    try:
        for chunk in range(0, 120, 20):
            for i, uid in enumerate(uids[chunk : chunk + 20]):
                target = nodes[i % 2] if i % 5 else f"{env.ns}-missing"  # every fifth is rejected
                writer.append(Bind(pod=uid, node=target))
                writer.append(Bind(pod=uid, node=nodes[0]))  # a second BIND: rejected if the first was admitted
            writer.flush()
            time.sleep(0.1)
            if chunk == 40:
                eventually(lambda: check(read_topic(env.settings, topic)), every_s=0.05)
                proc.kill()
                proc.wait()
                proc = _start(env, "--instance", "disp", "--workers", "0")
        admitted = {e.offset for e in env.log.refresh().admitted}
        assert len(admitted) == 120  # each pod's first BIND or, when that was rejected, its second
        eventually(lambda: check(len(read_topic(env.settings, topic)) >= len(admitted)))
        time.sleep(1.0)
        commands = decoded(read_topic(env.settings, topic))
        assert sorted(c.log_offset for c in commands) == sorted(admitted)  # no duplicate, none missing
        assert all(c.command_id == f"bind@{c.log_offset}" for c in commands)
    finally:
        _stop(proc)
