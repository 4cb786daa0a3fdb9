"""Rolling restart: every component restarted one replica at a time under load, the way a Kubernetes
rolling update does it: SIGTERM, wait for the exit (SIGKILL after the 30 s grace period), start the
new one, wait until it is up, then the next replica; the other replicas keep running meanwhile.

The deployment, on the shared broker and API server: `strata ingest` (1), `strata project` (1),
`strata schedule` (2 replicas; 1 in the quick run), `strata bind` (2) and `strata evict` (2; 1 in
the quick run). The load, all through the restarts: a gang of three pods created every second
(every half second in the full run), which the replicas place and the binders bind, and an EVICT
(written as a preempting scheduler would) for the first pod of every third gang once it is bound,
which the evictors carry out. Round one restarts binders and evictors under their own --instance
(a StatefulSet); the full run's second round gives them new names (a Deployment's new pods), so
their predecessors' static group memberships hold partitions until the session times out.

What must hold, from the log, the pods, the API server's audit log and the checkpoints:

* every command done once: binder-crash's check (every admitted BIND has its outcome and its pod
  is bound where it was admitted, one Binding per pod and one Eviction per evicted pod at the
  API server, no task left Binding, every applied EVICT answered), and every pod created was bound;
* 0 records lost: every pod created is in the log, on the node the API server has it on, and
  nothing the API server deleted is still there (ingest's restarts lost no watch event);
* every checkpoint the projector wrote, through its restarts, has the digest of an offline fold of
  the log's records at its version, and the last one stopped at the log's end;
* every process exited by itself, with 0, within its grace period.

Negative controls: a real second Binding call for a bound pod, an outcome dropped, a checkpoint
with a wrong digest, a pod missing from the log, the projector stopped one short of the end, and a
replica that had to be killed must each be reported.
"""

from __future__ import annotations

import random
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from strata.dev.faults import FaultContext, FaultResult, Verdict
from strata.dev.faults import binder_crash as crash
from strata.dev.faults.common import LogView, env_for, fresh_log, settled_writes, until
from strata.dev.faults.workload import CommandLog, Namespace, Process, Stopped, read_commands, stop_all
from strata.errors import StrataError
from strata.kubeapi import KubeApi
from strata.log.cachelog import CacheLogReader, CacheLogWriter
from strata.log.config import Settings
from strata.projector.checkpoints.sql import SqlCheckpointStore
from strata.projector.fold.kinds import FoldConfig
from strata.projector.runner import LogRunner
from strata.schemas import BindFailed, BindSucceeded, Evict, EvictFailed, EvictSucceeded

GANG = 3
_VERSION = re.compile(r"\bversion (\d+)\b")
_STOPPED = re.compile(r"^stopped at version (\d+)")


@dataclass(frozen=True)
class Component:
    """One Deployment or StatefulSet: its replicas' names, command line, and the line that says a
    new replica is up (what its readiness probe would wait for)."""

    kind: str
    replicas: tuple[str, ...]
    args: Callable[[str], list[str]]
    ready: str


def run(ctx: FaultContext) -> FaultResult:
    if not ctx.settings.kubeconfig:
        raise StrataError("the rolling-restart scenario needs a cluster: set KUBECONFIG (strata dev up exports it)")
    result = FaultResult("rolling-restart")
    api = KubeApi(ctx.settings.kubeconfig)
    ns = Namespace.create(api, nodes=4)
    try:
        with fresh_log(ctx.settings.with_(retry_delays_s=(1, 2)), "rolling") as settings:
            Rolling(ctx, result, settings, ns).run()
    finally:
        ns.cleanup()
    return result


@dataclass
class Rolling:
    ctx: FaultContext
    result: FaultResult
    settings: Settings
    ns: Namespace
    created: dict[str, str] = field(default_factory=dict)  # pod uid -> name
    evicting: set[str] = field(default_factory=set)  # pod uids an EVICT was written for
    procs: dict[str, Process] = field(default_factory=dict)  # replica name -> its process now
    replicas: dict[str, list[str]] = field(default_factory=dict)  # component -> its replicas' names now
    stops: list[Stopped] = field(default_factory=list)
    restarts: int = 0
    final: int | None = None  # the version the last projector said it stopped at

    def __post_init__(self) -> None:
        self.config = FoldConfig(scheduler_names=(self.ns.name,))
        self.db = f"sqlite:///{self.ctx.workdir / 'c.db'}"
        self.env = env_for(self.settings, STRATA_DB_URL=self.db)
        self.stop_load = threading.Event()
        self.log = LogView(CacheLogReader(self.settings), self.config)
        self.pause_s = 0.5 if self.ctx.quick else 1.0  # between restarts: the new replica at work

    def components(self) -> list[Component]:
        fold = ["--scheduler-name", self.ns.name]
        quick = self.ctx.quick
        return [
            Component("ingest", ("ingest",), lambda _n: ["ingest"], "synced:"),
            Component(
                "project",
                ("projector",),
                lambda n: ["project", "--checkpoint-every", "2000", "--checkpoint-seconds", "2", "--replica", n, *fold],
                "restored version",
            ),
            Component(
                "schedule",
                ("r0",) if quick else ("r0", "r1"),
                lambda n: ["schedule", "--replica", n, "--idle-wait", "0.2", *fold],
                "waiting for",
            ),
            Component("bind", ("b0", "b1"), lambda n: ["bind", "--instance", f"{self.ns.name}-{n}", *fold], "running"),
            Component(
                "evict",
                ("e0",) if quick else ("e0", "e1"),
                lambda n: ["evict", "--instance", f"{self.ns.name}-{n}", *fold],
                "running",
            ),
        ]

    # ------------------------------------------------------------------------------- the run
    def run(self) -> None:
        components = self.components()
        try:
            self._up(components)
            self._restarts_under_load(components)
            self._drain()
            self.ctx.log("  the load is done; stopping")
            self._stop_all()
            self.ctx.log("  stopped; checking")
            self._check()
        finally:
            self.stop_load.set()
            for proc in self.procs.values():
                proc.stop(5)
            self.log.close()

    def _up(self, components: list[Component]) -> None:
        """Every replica started at once, then waited for."""
        started = [(c, self._launch(c, name)) for c in components for name in c.replicas]
        for component, proc in started:
            self.replicas.setdefault(component.kind, []).append(proc.name)
            proc.wait_for(component.ready, 90)
        self.ctx.log(f"  {len(started)} processes up; the load starts")

    def _restarts_under_load(self, components: list[Component]) -> None:
        loaders = [threading.Thread(target=f, daemon=True) for f in (self._create_gangs, self._evict_some)]
        for t in loaders:
            t.start()
        time.sleep(self.pause_s * 3)  # load flowing before the first restart
        for r in range(1 if self.ctx.quick else 2):
            self._round(components, r)
        self.stop_load.set()
        for t in loaders:
            t.join(30)

    def _launch(self, component: Component, replica: str) -> Process:
        env = {**self.env, "STRATA_LOG_LEVEL": "INFO"} if component.kind == "project" else self.env
        self.procs[replica] = Process(replica, component.args(replica), env, self.ctx.workdir)
        return self.procs[replica]

    def _start(self, component: Component, replica: str) -> None:
        self._launch(component, replica).wait_for(component.ready, 90)

    def _round(self, components: list[Component], r: int) -> None:
        for component in components:
            # the second round: binders and evictors as a Deployment, whose new pods have new names
            renamed = r > 0 and component.kind in ("bind", "evict")
            names = self.replicas[component.kind]
            for i, old in enumerate(list(names)):
                stopped = self.procs.pop(old).stop()
                self.stops.append(stopped)
                names[i] = f"{old.split('-')[0]}-{r + 1}" if renamed else old
                self._start(component, names[i])
                self.restarts += 1
                self.ctx.log(f"  {component.kind} {old} -> {names[i]}: SIGTERM to exit {stopped.seconds:.1f} s")
                time.sleep(self.pause_s)  # the new replica at work before the next one goes

    # ------------------------------------------------------------------------------ the load
    def _create_gangs(self) -> None:
        n = 0
        while not self.stop_load.wait(1.0 if self.ctx.quick else 0.5):
            names = [f"g{n}-p{i}" for i in range(GANG)]
            for name, uid in self.ns.gang(f"g{n}", names).items():
                self.created[uid] = name
            n += 1

    def _evict_some(self) -> None:
        """EVICT the first pod of every third gang once the log has it bound."""
        writer = CacheLogWriter(self.settings)
        while not self.stop_load.wait(0.5):
            for task in list(self.log.refresh().state.tasks.values()):
                gang = task.name.split("-")[0][1:]
                if task.namespace != self.ns.name or not task.name.endswith("-p0") or not gang.isdigit():
                    continue
                if int(gang) % 3 == 0 and task.status in ("Bound", "Running") and task.uid not in self.evicting:
                    writer.append(Evict(pod=task.uid, reason="faults", replica="faults"))
                    self.evicting.add(task.uid)
            writer.flush()

    def _drain(self) -> None:
        """Until every pod is placed, every command answered, and the log has the pods as they are."""

        def settled() -> bool:
            tasks = {uid: t for uid, t in self.log.refresh().state.tasks.items() if t.namespace == self.ns.name}
            answered = {r.pod for r in self.log.of(BindSucceeded, BindFailed, EvictSucceeded, EvictFailed)}
            return (
                set(self.created) <= set(tasks)
                and all(t.status not in ("Pending", "Binding") for t in tasks.values())
                and self.evicting <= answered
            )

        if not until(settled, 180, every_s=1.0):
            self.ctx.log("  not settled after 180 s; checking what there is")

    def _stop_all(self) -> None:
        """Everything but the projector, then the projector once it has applied the log's end."""
        others = [self.procs.pop(n) for kind, names in self.replicas.items() if kind != "project" for n in names]
        self.stops += stop_all(others)
        end = CacheLogReader(self.settings).end_offset()
        projector = self.procs["projector"]
        until(lambda: max(_versions(projector), default=0) >= end, 120, every_s=0.5)
        self.stops.append(self.procs.pop("projector").stop())
        self.final = next((int(m.group(1)) for _, line in projector.lines if (m := _STOPPED.match(line))), None)

    # ----------------------------------------------------------------------------- the check
    def _check(self) -> None:
        store = SqlCheckpointStore(self.db)
        identity = LogRunner(self.settings, store, self.config).identity
        checkpoints = {c.version: c.digest for c in store.list(identity)}
        store.close()
        commands = read_commands(self.settings, self.config, digests_at=set(checkpoints))
        seen = self._observe(commands, checkpoints)
        self.result.count(check(seen), runs=max(1, self.restarts))
        _controls(self.result, seen, self.settings, self.ns)
        stops = [s.seconds for s in self.stops]
        self.result.notes.append(
            f"{len(seen.created)} pods, {len(seen.binds.admitted)} binds, {len(seen.binds.evicted)} evictions, "
            f"{self.restarts} restarts (SIGTERM to exit at most {max(stops, default=0):.1f} s); "
            f"{len(seen.checkpoints)} checkpoints to version {seen.end} checked; "
            f"{seen.binds.repeated_outcomes} outcome record(s) repeated"
        )

    def _observe(self, commands: CommandLog, checkpoints: dict[int, str]) -> Observed:
        pods = self.ns.pods()
        names = {**self.created, **{uid: p["metadata"]["name"] for uid, p in pods.items()}}
        binds = crash.Observed(
            placement=commands.admitted,
            names=names,
            admitted=frozenset(commands.admitted),
            bind_outcomes=tuple(o for o in commands.outcomes if isinstance(o, (BindSucceeded, BindFailed))),
            evicted=commands.evicted,
            evict_outcomes=frozenset(o.pod for o in commands.outcomes if isinstance(o, (EvictSucceeded, EvictFailed))),
            bound={uid: p["spec"].get("nodeName") for uid, p in pods.items()},
            writes=settled_writes(self.settings, self.ns.name),
            binding=tuple(commands.binding()),
        )
        tasks = {uid: t.node for uid, t in commands.state.tasks.items() if t.namespace == self.ns.name}
        return Observed(
            binds=binds,
            created=dict(self.created),
            logged=tasks,
            checkpoints=checkpoints,
            reference=commands.digests,
            end=commands.end,
            final=self.final,
            stops=tuple(self.stops),
        )


def _versions(proc: Process) -> list[int]:
    return [int(m.group(1)) for _, line in list(proc.lines) if (m := _VERSION.search(line))]


@dataclass(frozen=True)
class Observed:
    binds: crash.Observed  # the command side, as binder-crash checks it
    created: dict[str, str]  # pod uid -> name, every pod the load created
    logged: dict[str, str]  # pod uid -> node ("" unbound) of the namespace's tasks in the log's fold
    checkpoints: dict[int, str]  # version -> digest, every checkpoint the projector wrote
    reference: dict[int, str]  # version -> digest of the offline fold of the log's records
    end: int  # the log's end
    final: int | None  # the version the last projector stopped at
    stops: tuple[Stopped, ...]


def check(seen: Observed) -> Verdict:
    verdict = crash.check(seen.binds)
    for uid, name in sorted(seen.created.items()):
        if uid not in seen.binds.admitted:
            verdict.lost += 1
            verdict.problem(f"{name}: never bound")
    _check_ingest(verdict, seen)
    _check_projector(verdict, seen)
    for stop in seen.stops:
        if not stop.clean:
            how = "killed after its grace period" if stop.killed else f"exited with {stop.code}"
            verdict.problem(f"{stop.name}: {how}")
    return verdict


def _check_ingest(verdict: Verdict, seen: Observed) -> None:
    """The log holds every pod, on the node the API server has it on, and no pod it deleted."""
    for uid in sorted(set(seen.created) - set(seen.logged) - gone(seen)):
        verdict.lost += 1
        verdict.problem(f"{seen.created[uid]}: created, not in the log")
    for uid, node in sorted(seen.binds.bound.items()):
        if uid in seen.logged and (seen.logged[uid] or None) != node:
            verdict.mismatches += 1
            verdict.problem(
                f"{seen.binds.names.get(uid, uid)}: on {node} at the API server, {seen.logged[uid]!r} in the log"
            )
    for uid in sorted(set(seen.logged) - set(seen.binds.bound)):
        verdict.mismatches += 1
        verdict.problem(f"{seen.binds.names.get(uid, uid)}: deleted at the API server, still in the log")


def gone(seen: Observed) -> set[str]:
    """Pods the API server no longer has (evicted and deleted): absent from the log as they should be."""
    return set(seen.created) - set(seen.binds.bound)


def _check_projector(verdict: Verdict, seen: Observed) -> None:
    wrong = sorted(v for v, d in seen.checkpoints.items() if seen.reference.get(v) != d)
    if wrong:
        verdict.mismatches += len(wrong)
        verdict.problem(f"checkpoints at versions {wrong[:5]} differ from the offline fold")
    if seen.final != seen.end or seen.end not in seen.checkpoints:
        verdict.lost += max(0, seen.end - (seen.final or 0))
        verdict.problem(f"the projector stopped at version {seen.final}, the log ends at {seen.end}")


def _controls(result: FaultResult, seen: Observed, settings: Settings, ns: Namespace) -> None:
    bound = sorted(uid for uid, node in seen.binds.bound.items() if node and uid in seen.binds.admitted)
    if not bound:
        result.control("a real second Binding call", Verdict())  # nothing to break: the control fails
        return
    uid = random.Random(3).choice(bound)
    name, node = seen.binds.names[uid], seen.binds.bound[uid]
    binding = {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": name, "namespace": ns.name, "uid": uid},
        "target": {"apiVersion": "v1", "kind": "Node", "name": node},
    }
    ns.api.call("POST", f"/api/v1/namespaces/{ns.name}/pods/{name}/binding", binding, timeout=10.0)  # 409
    again = replace(seen.binds, writes=settled_writes(settings, ns.name))
    result.control("a real second Binding call", check(replace(seen, binds=again)))
    dropped = tuple(o for o in seen.binds.bind_outcomes if o.pod != uid)
    first = min(seen.checkpoints, default=seen.end)
    for what, broken in (
        ("a bind outcome dropped", replace(seen, binds=replace(seen.binds, bind_outcomes=dropped))),
        ("a checkpoint with a wrong digest", replace(seen, checkpoints={**seen.checkpoints, first: "0" * 64})),
        ("a pod missing from the log", replace(seen, logged={k: v for k, v in seen.logged.items() if k != uid})),
        ("the projector one record short", replace(seen, final=seen.end - 1)),
        ("a replica killed after its grace period", replace(seen, stops=(*seen.stops, Stopped("b0", -9, 30.0, True)))),
    ):
        result.control(what, check(broken))
