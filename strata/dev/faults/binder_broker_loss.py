"""Binder broker loss: the binder's and the evictor's consumer groups on a three-broker cluster
(replication 3, min.insync.replicas 2, as broker-loss builds it) while commands flow.

`strata ingest`, two `strata bind` and two `strata evict` processes run against the cluster and the
shared API server. One pod in ten is refused by an admission policy: a genuine terminal failure,
which must end in the dead-letter topic and BIND_FAILED. The first half's BINDs are written at a
steady pace while one broker is SIGKILLed and brought back; then the second half's BINDs and
EVICTs for every other pod of the first half, interleaved, while the whole cluster shuts down
(SIGTERM to all three) and starts again. The quick run loses one broker, in the second flow only.
A process that exits meanwhile (a fatal Kafka error) is started again, as its Deployment would
start it, and named in the notes.

What must hold, from the log, the dead-letter topics and the API server's audit log: every
command done exactly once: each pod bound where its BIND said, with one Binding call that took
effect, and one BIND_SUCCEEDED; each refused pod refused (no call of it took effect), one
BIND_FAILED and one dead letter (terminal); each evicted pod one Eviction and one
EVICT_SUCCEEDED; no other dead letter; no task left Binding; every process stops cleanly at the
end. A refused call made again did nothing (binder-crash's rule) and is counted in the notes.

Negative controls: an outcome record repeated, an outcome dropped, a refused command dead-lettered
twice, a dead letter for a pod that was bound, a second Eviction call, a refused pod bound after
all, and a binder that did not stop cleanly must each be reported.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from itertools import zip_longest

from strata.dev.faults import FaultContext, FaultResult, Verdict
from strata.dev.faults.binder_crash import repeated_calls
from strata.dev.faults.cluster import ThreeBrokers
from strata.dev.faults.common import LogView, env_for, fresh_log, settled_writes, until
from strata.dev.faults.workload import (
    DENIED,
    DeadLetter,
    Namespace,
    Outcome,
    Process,
    Stopped,
    Writer,
    dead_letters,
    in_log,
    per_pod,
    read_commands,
    start_all,
    stop_all,
)
from strata.errors import StrataError
from strata.kubeapi import KubeApi
from strata.log.cachelog import CacheLogReader
from strata.log.config import Settings
from strata.log.topics import TopicNames
from strata.projector.fold.kinds import FoldConfig
from strata.schemas import Bind, BindFailed, BindSucceeded, Evict, EvictFailed, EvictSucceeded, LogRecord

RATE = 40  # commands a second: they flow while the brokers go


def run(ctx: FaultContext) -> FaultResult:
    if not ctx.settings.kubeconfig:
        raise StrataError("the binder-broker-loss scenario needs a cluster: set KUBECONFIG (strata dev up exports it)")
    result = FaultResult("binder-broker-loss")
    cluster = ThreeBrokers(ctx.workdir / "cluster")
    ctx.log("  formatting and starting three brokers")
    cluster.format()
    for i in range(3):
        cluster.start(i)
    api = KubeApi(ctx.settings.kubeconfig)
    ns = Namespace.create(api, nodes=4)
    try:
        cluster.wait_ready()
        ctx.log("  three brokers ready")
        base = Settings(
            bootstrap=cluster.bootstrap,
            data_dir=ctx.settings.data_dir,
            kubeconfig=ctx.settings.kubeconfig,
            replication_factor=3,
            min_insync_replicas=2,
            retry_delays_s=(1, 2),
        )
        with fresh_log(base, "binder-brokers") as settings:
            BrokerLoss(ctx, result, cluster, settings, ns).run()
    finally:
        ns.cleanup()
        cluster.down()
    return result


class BrokerLoss:
    def __init__(
        self, ctx: FaultContext, result: FaultResult, cluster: ThreeBrokers, settings: Settings, ns: Namespace
    ) -> None:
        self.ctx, self.result, self.cluster, self.settings, self.ns = ctx, result, cluster, settings, ns
        self.config = FoldConfig(scheduler_names=(ns.name,))
        self.env = env_for(settings, STRATA_DB_URL=f"sqlite:///{ctx.workdir / 'c.db'}")
        self.log = LogView(CacheLogReader(settings), self.config)
        self.procs: list[Process] = []
        self.without_offset = 0  # deliveries the broker reported without an offset (a resent batch)
        self.restarted: list[str] = []
        self.revived: set[str] = set()
        self.ready: dict[str, str] = {}  # process name -> the line that says it is up

    def run(self) -> None:
        pods = 60 if self.ctx.quick else 400
        names = [f"{DENIED}{i}" if i % 10 == 9 else f"p{i}" for i in range(pods)]
        self.ns.deny_bindings()
        uids = self.ns.singles(names)
        plan = Plan.of(names, uids, self.ns)
        try:
            self._start_all()
            self._wait(lambda: in_log(self.log, uids.values()), 60, "the pods in the log")
            self._commands(plan)
            self._revive(wait=True)  # every process up, so that each is judged by its stop
            stops = stop_all(self.procs)
        finally:
            stop_all(self.procs, 5)
            self.log.close()
        seen = self._observe(uids, plan, stops)
        self.result.count(check(seen), runs=1 if self.ctx.quick else 2)
        _controls(self.result, seen)
        self.result.notes.append(
            f"{len(plan.placement)} binds ({len(seen.denied)} refused by policy), {len(plan.evicted)} evictions; "
            f"{len(seen.dead)} dead letters; {seen.writes_total} API writes audited "
            f"({seen.refused_again} refused call(s) made again); "
            f"{self.without_offset} of the scenario's records delivered without an offset"
            + "".join(f"; {r}" for r in seen.restarted)
        )

    def _commands(self, plan: Plan) -> None:
        """The full run loses a broker while the first half's binds flow, and the whole cluster
        while the second half's binds and the first half's evictions flow; the quick run only a
        broker, in the second."""
        self.ctx.log("  binds flow")
        self._flow([plan.bind(uid) for uid in plan.first], None if self.ctx.quick else self._lose_one_broker)
        self._settle(lambda: self._answered(BindSucceeded, BindFailed) >= set(plan.first), "the first binds answered")
        self.ctx.log("  binds and evictions flow")
        evicts = [Evict(pod=uid, reason="faults", replica="faults") for uid in plan.evicted]
        both = [r for pair in zip_longest([plan.bind(uid) for uid in plan.second], evicts) for r in pair if r]
        self._flow(both, self._lose_one_broker if self.ctx.quick else self._restart_cluster)
        self._settle(lambda: self._answered(BindSucceeded, BindFailed) >= set(plan.placement), "every bind answered")
        self._settle(lambda: self._answered(EvictSucceeded, EvictFailed) >= set(plan.evicted), "every evict answered")
        # the binds' watch events reach the log after the API has them
        self._settle(lambda: not _binding(self.log), "the binds' watch events in the log")
        self.ctx.log("  every command answered; stopping")

    def _start_all(self) -> None:
        fold = ["--scheduler-name", self.ns.name]
        specs = [("ingest", ["ingest", "--kinds", "Pod,Node,PodGroup"], "synced:")]
        for i in range(2):
            specs.append((f"bind-{i}", ["bind", "--instance", f"{self.ns.name}-b{i}", *fold], "running"))
            specs.append((f"evict-{i}", ["evict", "--instance", f"{self.ns.name}-e{i}", *fold], "running"))
        self.ready = {name: ready for name, _, ready in specs}
        self.procs = start_all(specs, self.env, self.ctx.workdir)

    def _flow(self, records: Sequence[LogRecord], fault: Callable[[], None] | None) -> None:
        """Write ``records`` at RATE a second on a thread of their own while ``fault`` happens."""
        writer = Writer(self.settings)
        errors: list[str] = []

        def write() -> None:
            try:
                for i, record in enumerate(records):
                    writer.append(record)
                    if i % (RATE // 10) == 0:
                        time.sleep(0.1)
                writer.flush(timeout_s=300)
            except Exception as exc:  # reported: a writer that died is no pass
                errors.append(f"{type(exc).__name__}: {exc}")

        thread = threading.Thread(target=write, daemon=True)
        thread.start()
        time.sleep(min(1.5, len(records) / RATE / 3))  # commands in flight when the fault comes
        if fault is not None:
            fault()
        thread.join(330)
        self.without_offset += writer.without_offset
        if errors:
            raise StrataError(f"the scenario's own writer failed: {errors[0]}")

    def _lose_one_broker(self) -> None:
        self.ctx.log("  broker 2 killed while binds flow")
        self.cluster.kill(1)
        time.sleep(3 if self.ctx.quick else 5)
        self.cluster.start(1)
        self.cluster.wait_ready()
        self.ctx.log("  broker 2 back")

    def _restart_cluster(self) -> None:
        self.ctx.log("  the whole cluster stops while evictions flow")
        self.cluster.stop_all()
        time.sleep(3)
        for i in range(3):
            self.cluster.start(i)
        self.cluster.wait_ready()
        self.ctx.log("  the cluster is back")

    def _answered(self, *kinds: type) -> set[str]:
        return {r.pod for r in self.log.of(*kinds)}

    def _wait(self, done: Callable[[], bool], timeout_s: float, what: str) -> None:
        if not until(done, timeout_s, every_s=0.5):
            raise StrataError(f"timed out waiting for {what}; {self._died()}")

    def _settle(self, done: Callable[[], bool], what: str, timeout_s: float = 240) -> None:
        """Wait for ``done``, starting again what exited meanwhile; past the timeout, the check
        says what is missing."""

        def probe() -> bool:
            self._revive()
            return done()

        if not until(probe, timeout_s, every_s=0.5):
            self.ctx.log(f"  timed out waiting for {what}; checking what there is")

    def _revive(self, wait: bool = False) -> None:
        """Start again, with the same arguments, a process that exited: what its Deployment does
        (a binder exits on a fatal Kafka error, a consumer fenced after a broker loss). Noted."""
        for i, proc in enumerate(self.procs):
            if proc.proc.poll() is not None:
                self.restarted.append(f"{proc.name} exited ({proc.proc.returncode}: {proc.tail(1)[-160:]})")
                self.ctx.log(f"  {self.restarted[-1]}; started again")
                self.procs[i] = Process(proc.name, proc.args, self.env, self.ctx.workdir)
                self.revived.add(proc.name)
        for proc in self.procs if wait else ():
            if proc.name in self.revived:
                proc.wait_for(self.ready[proc.name], 90)

    def _died(self) -> str:
        return "; ".join(f"{p.name} ended: {p.tail(1)}" for p in self.procs if p.proc.poll() is not None)

    def _observe(self, uids: dict[str, str], plan: Plan, stops: tuple[Stopped, ...]) -> Observed:
        commands = read_commands(self.settings, self.config)
        names = TopicNames(self.settings.topic_prefix)
        pods = self.ns.pods()
        return Observed(
            names={uid: name for name, uid in uids.items()},
            placement=plan.placement,
            denied=frozenset(uid for name, uid in uids.items() if name.startswith(DENIED)),
            evicted=frozenset(plan.evicted),
            admitted=frozenset(commands.admitted),
            outcomes=commands.outcomes,
            dead=dead_letters(self.settings, names.dead_letter("bind"))
            + dead_letters(self.settings, names.dead_letter("evict")),
            writes=settled_writes(self.settings, self.ns.name),
            bound={uid: p["spec"].get("nodeName") for uid, p in pods.items()},
            binding=tuple(commands.binding()),
            stops=stops,
            restarted=tuple(self.restarted),
        )


@dataclass(frozen=True)
class Plan:
    """Which node each pod's BIND names, which pods are bound in which flow, which evicted."""

    placement: dict[str, str]  # pod uid -> node
    first: list[str]
    second: list[str]
    evicted: list[str]  # every other pod of the first half that the policy lets bind

    @classmethod
    def of(cls, names: list[str], uids: dict[str, str], ns: Namespace) -> Plan:
        half = len(names) // 2
        return cls(
            placement={uids[n]: ns.node(i) for i, n in enumerate(names)},
            first=[uids[n] for n in names[:half]],
            second=[uids[n] for n in names[half:]],
            evicted=[uids[n] for n in names[:half:2] if not n.startswith(DENIED)],
        )

    def bind(self, uid: str) -> Bind:
        return Bind(pod=uid, node=self.placement[uid], replica="faults")


def _binding(log: LogView) -> bool:
    return any(t.status == "Binding" for t in log.refresh().state.tasks.values())


@dataclass(frozen=True)
class Observed:
    names: dict[str, str]  # pod uid -> name
    placement: dict[str, str]  # pod uid -> the node its BIND named
    denied: frozenset[str]  # pods an admission policy refuses to bind
    evicted: frozenset[str]  # pods an EVICT was written for
    admitted: frozenset[str]  # BINDs the fold admitted
    outcomes: tuple[Outcome, ...]
    dead: tuple[DeadLetter, ...]  # both dead-letter topics
    writes: dict[tuple[str, str], tuple[int, ...]]  # audited (binding|eviction|delete, name) -> statuses
    bound: dict[str, str | None]  # pod uid -> nodeName at the end
    binding: tuple[str, ...]  # tasks left Binding
    stops: tuple[Stopped, ...]
    restarted: tuple[str, ...]  # processes that exited during the run and were started again

    @property
    def writes_total(self) -> int:
        return sum(len(s) for s in self.writes.values())

    @property
    def refused_again(self) -> int:
        """Refused Binding calls made again (a refusal leaves nothing on the pod that a binder
        taking over the command could read)."""
        calls = (self.writes.get(("binding", self.names[uid]), ()) for uid in self.denied)
        return sum(max(0, len(c) - 1) for c in calls)


def check(seen: Observed) -> Verdict:
    verdict = Verdict(lost=len(seen.binding))
    if seen.binding:
        verdict.problem(f"{len(seen.binding)} task(s) left Binding")
    outcomes = Counter((type(o).__name__, o.pod) for o in seen.outcomes)
    dead = Counter(d.pod for d in seen.dead)
    for uid in sorted(seen.placement):
        name = seen.names.get(uid, uid)
        found = Verdict()
        if uid not in seen.admitted:
            found.problem(f"{name}: BIND not admitted")
        if uid in seen.denied:
            _check_refused(found, seen, uid, name, outcomes, dead)
        else:
            _check_bound(found, seen, uid, name, outcomes)
        per_pod(verdict, found)
    for uid in sorted(seen.evicted):
        name = seen.names.get(uid, uid)
        _once(verdict, outcomes[("EvictSucceeded", uid)], f"{name}: EVICT_SUCCEEDED")
        if outcomes[("EvictFailed", uid)]:
            verdict.problem(f"{name}: EVICT_FAILED")
        calls = seen.writes.get(("eviction", name), ()) + seen.writes.get(("delete", name), ())
        repeated_calls(verdict, calls, name, "Eviction", True)
    for d in seen.dead:
        if d.pod not in seen.denied or d.reason != "terminal":
            verdict.problem(f"{seen.names.get(d.pod, d.pod or 'a message')}: dead letter ({d.reason}) without a cause")
    for stop in seen.stops:
        if not stop.clean:
            verdict.problem(f"{stop.name}: stopped with {stop.code}{' (killed)' if stop.killed else ''}")
    return verdict


def _check_bound(verdict: Verdict, seen: Observed, uid: str, name: str, outcomes: Counter[tuple[str, str]]) -> None:
    _once(verdict, outcomes[("BindSucceeded", uid)], f"{name}: BIND_SUCCEEDED")
    if outcomes[("BindFailed", uid)]:
        verdict.problem(f"{name}: BIND_FAILED for a pod that may be bound")
    node = seen.bound.get(uid)
    if node != seen.placement[uid] and not (node is None and uid not in seen.bound and uid in seen.evicted):
        verdict.lost += 1
        verdict.problem(f"{name}: on {node}, its BIND said {seen.placement[uid]}")
    repeated_calls(verdict, seen.writes.get(("binding", name), ()), name, "Binding", True)


def _check_refused(
    verdict: Verdict, seen: Observed, uid: str, name: str, outcomes: Counter[tuple[str, str]], dead: Counter[str]
) -> None:
    """A refused bind is answered once too: one BIND_FAILED, one dead letter, and a refused call.
    A refused call again is no duplicate (binder-crash's rule: a call after one that did nothing),
    but it is counted in the notes."""
    _once(verdict, outcomes[("BindFailed", uid)], f"{name}: BIND_FAILED")
    _once(verdict, dead[uid], f"{name}: dead letter")
    calls = seen.writes.get(("binding", name), ())
    if not calls:
        verdict.lost += 1
        verdict.problem(f"{name}: no Binding call at the API server")
    if seen.bound.get(uid) or any(code < 300 for code in calls):
        verdict.mismatches += 1
        verdict.problem(f"{name}: refused by the policy, yet bound to {seen.bound[uid]}")


def _once(verdict: Verdict, n: int, what: str) -> None:
    if n == 0:
        verdict.lost += 1
        verdict.problem(f"{what} missing")
    elif n > 1:
        verdict.duplicates += n - 1
        verdict.problem(f"{what} {n} times")


def _controls(result: FaultResult, seen: Observed) -> None:
    fine = sorted(set(seen.placement) - seen.denied - seen.evicted)
    denied = sorted(seen.denied)
    if not fine or not denied or not seen.evicted:
        result.control("a bind outcome repeated", Verdict())  # nothing to break: the control fails
        return
    uid, refused, evicted = fine[0], denied[0], sorted(seen.evicted)[0]
    again = next(o for o in seen.outcomes if o.pod == uid)
    writes = dict(seen.writes)
    key = ("eviction", seen.names[evicted])
    writes[key] = (*writes.get(key, ()), 429)  # even refused, a second call after success
    refused_call = ("binding", seen.names[refused])
    refused_calls = seen.writes.get(refused_call, ())
    for what, broken in (
        ("a bind outcome repeated", replace(seen, outcomes=(*seen.outcomes, again))),
        ("a bind outcome dropped", replace(seen, outcomes=tuple(o for o in seen.outcomes if o.pod != uid))),
        ("a refused command dead-lettered twice", replace(seen, dead=(*seen.dead, DeadLetter(refused, "terminal")))),
        ("a dead letter for a bound pod", replace(seen, dead=(*seen.dead, DeadLetter(uid, "exhausted")))),
        ("a second Eviction call", replace(seen, writes=writes)),
        ("a refused pod bound after all", replace(seen, writes={**seen.writes, refused_call: (*refused_calls, 201)})),
        ("a binder that did not stop cleanly", replace(seen, stops=(*seen.stops, Stopped("bind-0", 1, 0.5)))),
    ):
        result.control(what, check(broken))
