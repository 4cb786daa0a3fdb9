"""Retry re-pause: a retry tier's partitions held back for their delay go through a rebalance.

One retry tier (a fixed delay: 8 s, 20 s in the full run) behind the bind command topic. An
admission webhook whose server is not there makes every Binding of the namespace answer 500, so
the first attempt of each BIND fails and the command waits in the tier, whose worker pauses the
partitions whose head is not due. The webhook goes; then a second `strata bind` joins while the
heads are held, and its tier worker is assigned partitions the first one held. The full run does it
again the other way: a second batch is held while the second binder leaves, and the first one is
assigned its partitions back once the static membership's session ends.

What must hold, from the API server's audit log (each call's time), the log and the dead-letter
topic: each command's retry reached the API server no sooner than the tier's delay after its
failed first call (none early); every command was carried out (the pod bound where its BIND said,
one BIND_SUCCEEDED), none twice (one Binding call after the failed one, no repeated outcome), and
none dead-lettered; and each rebalance met a held head that the worker assigned it paused again
(the workers' own INFO lines), else the run did not test what it is for.

Negative controls: a retry before its delay, a command never retried, a command done twice, a
dead letter, and a rebalance that met no held partition must each be reported.
"""

from __future__ import annotations

import re
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, replace

from strata.dev.faults import FaultContext, FaultResult, Verdict
from strata.dev.faults.binder_crash import repeated_calls
from strata.dev.faults.common import ApiCall, LogView, api_calls, env_for, fresh_log, until
from strata.dev.faults.workload import (
    DeadLetter,
    Namespace,
    Process,
    Stopped,
    dead_letters,
    in_log,
    per_pod,
    read_commands,
)
from strata.errors import StrataError
from strata.kubeapi import KubeApi
from strata.log.cachelog import CacheLogReader, CacheLogWriter
from strata.log.config import Settings
from strata.log.topics import TopicNames
from strata.projector.fold.kinds import FoldConfig
from strata.schemas import Bind, BindFailed, BindSucceeded

_ASSIGNED = re.compile(r"bind-(\S+)-retry-\d+s: assigned ([\d,]*)")
_HOLDING = re.compile(r"bind-(\S+)-retry-\d+s: holding partition (\d+) at offset \d+ until (\d+)")
SLACK_S = 0.005  # the audit log's and the record timestamps' rounding


def run(ctx: FaultContext) -> FaultResult:
    if not ctx.settings.kubeconfig:
        raise StrataError("the retry-repause scenario needs a cluster: set KUBECONFIG (strata dev up exports it)")
    result = FaultResult("retry-repause")
    api = KubeApi(ctx.settings.kubeconfig)
    ns = Namespace.create(api, nodes=2)
    try:
        delay_s = 8 if ctx.quick else 20
        with fresh_log(ctx.settings.with_(retry_delays_s=(delay_s,)), "repause") as settings:
            Repause(ctx, result, settings, ns, delay_s).run()
    finally:
        ns.cleanup()
    return result


@dataclass(frozen=True)
class Rebalance:
    """A rebalance the scenario caused (a binder joined or left) and the holds that followed it:
    partitions a worker was assigned and paused again because their head was not due."""

    what: str
    at: float  # when the scenario caused it (epoch seconds)
    held: int  # holds after it of a head not due when its worker was assigned it


class Repause:
    def __init__(self, ctx: FaultContext, result: FaultResult, settings: Settings, ns: Namespace, delay_s: int) -> None:
        self.ctx, self.result, self.settings, self.ns, self.delay_s = ctx, result, settings, ns, delay_s
        self.config = FoldConfig(scheduler_names=(ns.name,))
        self.env = env_for(
            settings,
            STRATA_DB_URL=f"sqlite:///{ctx.workdir / 'c.db'}",
            STRATA_LOG_LEVEL="INFO",
        )
        self.log = LogView(CacheLogReader(settings), self.config)
        self.writer = CacheLogWriter(settings)
        self.procs: dict[str, Process] = {}  # running now
        self.started: list[Process] = []
        self.stops: list[Stopped] = []
        self.rebalances: list[tuple[str, float]] = []
        self.placement: dict[str, str] = {}

    def run(self) -> None:
        per_batch = 16 if self.ctx.quick else 30
        names = [f"p{i}" for i in range(per_batch * (1 if self.ctx.quick else 2))]
        uids = self.ns.singles(names)
        batches = [[uids[n] for n in names[i : i + per_batch]] for i in range(0, len(names), per_batch)]
        try:
            self._start("ingest", ["ingest", "--kinds", "Pod,Node,PodGroup"], "synced:")
            self._start("a", self._bind("a"), "running")
            self._wait(lambda: in_log(self.log, uids.values()), 60, "the pods in the log")
            self._join(batches[0])
            if not self.ctx.quick:
                self._leave(batches[1])
            for name in list(self.procs):
                self.stops.append(self.procs.pop(name).stop())
        finally:
            for proc in self.procs.values():
                proc.stop(5)
            self.log.close()
        seen = self._observe(uids, [line for p in self.started for line in p.lines])
        self.result.count(check(seen), runs=len(seen.rebalances))
        _controls(self.result, seen)
        self.result.notes.append(_summary(seen))

    def _bind(self, instance: str) -> list[str]:
        return ["bind", "--instance", f"{self.ns.name}-{instance}", "--scheduler-name", self.ns.name]

    def _join(self, batch: list[str]) -> None:
        """The batch held in the tier; a second binder joins meanwhile."""
        self._held(batch)
        self.rebalances.append(("a second binder joins", time.time()))
        self._start("b", self._bind("b"), "running")
        self._settle(lambda: self._done(batch), self.delay_s + 60, "the first batch bound")

    def _leave(self, batch: list[str]) -> None:
        """The batch held in the tier; the second binder leaves meanwhile (a clean stop: its static
        membership frees its partitions once the session times out)."""
        self._held(batch)
        self.rebalances.append(("the second binder leaves", time.time()))
        self.stops.append(self.procs.pop("b").stop())
        self._settle(lambda: self._done(batch), self.delay_s + 60, "the second batch bound")

    def _start(self, name: str, args: list[str], ready: str) -> None:
        self.procs[name] = Process(name, args, self.env, self.ctx.workdir)
        self.started.append(self.procs[name])
        self.procs[name].wait_for(ready, 90)

    def _held(self, batch: list[str]) -> None:
        """BINDs for the batch while every Binding fails: into the tier they go; then bindings work
        again (well before the tier's delay is over)."""
        self.ns.fail_bindings()
        try:
            for i, uid in enumerate(batch):
                self.placement[uid] = self.ns.node(i)
                self.writer.append(Bind(pod=uid, node=self.placement[uid], replica="faults"))
            self.writer.flush()
            names = {self.log.state.tasks[uid].name for uid in batch}
            self._wait(lambda: names <= self._failed_once(), 60, "each first attempt to fail")
        finally:
            self.ns.allow_bindings()

    def _failed_once(self) -> set[str]:
        calls = api_calls(self.settings, self.ns.name)
        return {name for (what, name), found in calls.items() if what == "binding" and found[0].status == 500}

    def _done(self, batch: list[str]) -> bool:
        return {r.pod for r in self.log.of(BindSucceeded, BindFailed)} >= set(batch)

    def _wait(self, done: Callable[[], bool], timeout_s: float, what: str) -> None:
        if not until(done, timeout_s, every_s=0.5):
            raise StrataError(f"timed out waiting for {what}")

    def _settle(self, done: Callable[[], bool], timeout_s: float, what: str) -> None:
        """Wait for ``done``; past the timeout, the check says what is missing."""
        if not until(done, timeout_s, every_s=0.5):
            self.ctx.log(f"  timed out waiting for {what}; checking what there is")

    def _observe(self, uids: dict[str, str], logs: list[tuple[float, str]]) -> Observed:
        commands = read_commands(self.settings, self.config)
        names = {uid: name for name, uid in uids.items()}
        calls = _settled_calls(self.settings, self.ns.name)
        return Observed(
            pods=names,
            placement=dict(self.placement),
            delay_s=self.delay_s,
            calls={name: calls.get(("binding", name), ()) for name in names.values()},
            succeeded=commands.count(BindSucceeded),
            failed=commands.count(BindFailed),
            dead=dead_letters(self.settings, TopicNames(self.settings.topic_prefix).dead_letter("bind")),
            bound=self.ns.bound(),
            rebalances=tuple(Rebalance(what, at, _reheld(logs, at)) for what, at in self.rebalances),
            stops=tuple(self.stops),
        )


def _summary(seen: Observed) -> str:
    waits = [c[1].received - c[0].answered for c in seen.calls.values() if len(c) > 1]
    return (
        f"{len(seen.pods)} commands through the {seen.delay_s}s tier; retried "
        f"{min(waits, default=0):.2f} to {max(waits, default=0):.2f} s after their failure; "
        + ", ".join(f"{r.what}: {r.held} head(s) held again" for r in seen.rebalances)
    )


def _settled_calls(settings: Settings, ns: str) -> dict[tuple[str, str], tuple[ApiCall, ...]]:
    last = api_calls(settings, ns)
    for _ in range(30):  # the audit log gets each event as its request ends
        time.sleep(1.0)
        now = api_calls(settings, ns)
        if now == last:
            break
        last = now
    return last


def _reheld(lines: list[tuple[float, str]], since: float) -> int:
    """Holds, after ``since``, of a partition whose worker was assigned it after ``since`` while its
    head was not due: the pause a rebalance forgets, made again."""
    assigned: dict[tuple[str, int], float] = {}  # (instance, partition) -> when assigned after ``since``
    held = 0
    for at, line in sorted(lines):
        if at < since:
            continue
        if m := _ASSIGNED.search(line):
            for p in filter(None, m.group(2).split(",")):
                assigned[(m.group(1), int(p))] = at
        elif (m := _HOLDING.search(line)) and (key := (m.group(1), int(m.group(2)))) in assigned:
            held += int(m.group(3)) / 1000 > assigned[key]
    return held


@dataclass(frozen=True)
class Observed:
    pods: dict[str, str]  # pod uid -> name: one command each, through the tier
    placement: dict[str, str]  # pod uid -> its BIND's node
    delay_s: int
    calls: dict[str, tuple[ApiCall, ...]]  # pod name -> its Binding calls, in order
    succeeded: Counter[str]
    failed: Counter[str]
    dead: tuple[DeadLetter, ...]
    bound: dict[str, str | None]
    rebalances: tuple[Rebalance, ...]
    stops: tuple[Stopped, ...]


def check(seen: Observed) -> Verdict:
    verdict = Verdict()
    for uid, name in sorted(seen.pods.items()):
        found = Verdict()
        _check_calls(found, seen, name)
        if seen.succeeded[uid] != 1:
            found.lost += seen.succeeded[uid] == 0
            found.duplicates += max(0, seen.succeeded[uid] - 1)
            found.problem(f"{name}: {seen.succeeded[uid]} BIND_SUCCEEDED")
        if seen.failed[uid]:
            found.problem(f"{name}: BIND_FAILED")
        if seen.bound.get(uid) != seen.placement.get(uid):
            found.lost += 1
            found.problem(f"{name}: on {seen.bound.get(uid)}, its BIND said {seen.placement.get(uid)}")
        per_pod(verdict, found)
    for d in seen.dead:
        verdict.problem(f"{seen.pods.get(d.pod, d.pod)}: dead-lettered ({d.reason})")
    for r in seen.rebalances:
        if not r.held:
            verdict.problem(f"{r.what}: no worker was assigned a held partition (nothing was tested)")
    for stop in seen.stops:
        if not stop.clean:
            verdict.problem(f"{stop.name}: stopped with {stop.code}{' (killed)' if stop.killed else ''}")
    return verdict


def _check_calls(verdict: Verdict, seen: Observed, name: str) -> None:
    """The failed first call, then one retry no sooner than the delay after it, and no other."""
    calls = seen.calls.get(name, ())
    if not calls or calls[0].status != 500:
        verdict.problem(f"{name}: the first attempt did not fail ({[c.status for c in calls]}): no retry tested")
        return
    if len(calls) == 1:
        verdict.lost += 1
        verdict.problem(f"{name}: never retried")
        return
    waited = calls[1].received - calls[0].answered
    if waited < seen.delay_s - SLACK_S:
        verdict.problem(f"{name}: retried {waited:.2f} s after its failure, before the {seen.delay_s} s delay")
    repeated_calls(verdict, tuple(c.status for c in calls[1:]), name, "Binding", True)


def _controls(result: FaultResult, seen: Observed) -> None:
    retried = sorted(name for name, calls in seen.calls.items() if len(calls) > 1)
    if not retried:
        result.control("a retry before its delay", Verdict())  # nothing to break: the control fails
        return
    name = retried[0]
    first, second = seen.calls[name][:2]
    early = (first, replace(second, received=first.answered + seen.delay_s - 1.0))
    uid = next(u for u, n in seen.pods.items() if n == name)
    for what, broken in (
        ("a retry before its delay", replace(seen, calls={**seen.calls, name: early})),
        ("a command never retried", replace(seen, calls={**seen.calls, name: (first,)})),
        (
            "a command done twice",
            replace(seen, calls={**seen.calls, name: (first, second, replace(second, status=409))}),
        ),
        ("a dead letter", replace(seen, dead=(*seen.dead, DeadLetter(uid, "exhausted")))),
        (
            "a rebalance that held nothing",
            replace(seen, rebalances=(*seen.rebalances[:-1], replace(seen.rebalances[-1], held=0))),
        ),
    ):
        result.control(what, check(broken))
