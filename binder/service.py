"""`strata bind` and `strata evict` as one process: a dispatcher, N source workers, a worker per tier.

Each part runs on its own thread; the first one to fail stops all (the error is raised to the
CLI, which prints it on one line). Shutdown (SIGTERM/SIGINT sets ``stop``) lets every worker
finish its batch: each step commits or aborts its own transaction, so nothing is left open.
"""

from __future__ import annotations

import os
import socket
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from strata.binder import metrics
from strata.binder.actions import Action
from strata.binder.bind import BindAction
from strata.binder.dispatcher import Dispatcher
from strata.binder.evict import EvictAction, Mode
from strata.binder.worker import CommandWorker, Stage, WorkSpec, stages
from strata.kubeapi import KubeApi
from strata.log.config import Settings
from strata.log.topics import Work, require_topics, work_topics
from strata.projector.fold.state import FoldConfig
from strata.schemas import BindCommand, BindFailed, BindSucceeded, EvictCommand, EvictFailed, EvictSucceeded

BIND = WorkSpec(
    work="bind",
    group="binder",
    command_type=BindCommand,
    succeeded=lambda c: BindSucceeded(pod=c.pod_uid, node=c.node, bind_offset=c.log_offset),
    failed=lambda c, reason: BindFailed(pod=c.pod_uid, reason=reason, bind_offset=c.log_offset),
)
EVICT = WorkSpec(
    work="evict",
    group="evictor",
    command_type=EvictCommand,
    succeeded=lambda c: EvictSucceeded(pod=c.pod_uid, evict_offset=c.log_offset),
    failed=lambda c, reason: EvictFailed(pod=c.pod_uid, reason=reason, evict_offset=c.log_offset),
)
SPECS: dict[str, WorkSpec] = {"bind": BIND, "evict": EVICT}


def _zero_counters(work: Work, all_stages: list[Stage]) -> None:
    """Export every outcome, tier and dead-letter cause at 0 from the start: a series that appears
    only with its first event makes rate() and a dashboard's panel blind to that event."""
    for outcome in ("succeeded", "failed"):
        metrics.OUTCOMES.labels(work, outcome)
    for cause in ("malformed", "terminal", "exhausted"):
        metrics.DEAD_LETTERS.labels(work, cause)
    for stage in all_stages:
        if not stage.last:
            metrics.RETRIES.labels(work, stage.next_topic)
    metrics.BAD_COMMANDS.labels(all_stages[0].topic)
    metrics.DISPATCHED.labels(work)


def default_instance() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"


@dataclass
class Service:
    settings: Settings
    work: Work
    fold: FoldConfig = field(default_factory=FoldConfig)
    workers: int = 2
    instance: str = field(default_factory=default_instance)
    dispatch: bool = True
    mode: Mode = "eviction"
    threads: int = 32  # concurrent API calls per process
    batch_max: int = 500
    stop: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        self.errors: list[BaseException] = []
        self._threads: list[threading.Thread] = []
        self.parts: list[Any] = []

    def action(self, api: KubeApi) -> Action:
        return BindAction(api) if self.work == "bind" else EvictAction(api, self.mode)

    def start(self) -> None:
        require_topics(self.settings, work_topics(self.settings, self.work))  # missing: one line now, not a silent wait
        spec = SPECS[self.work]
        api = KubeApi(self.settings.kubeconfig, pool_size=self.threads * 2)
        action = self.action(api)
        self.pool = ThreadPoolExecutor(self.threads, thread_name_prefix=f"{self.work}-call")
        if self.dispatch:
            self.parts.append(Dispatcher(self.settings, self.fold, self.stop, f"{self.instance}-{self.work}"))
        source, *tiers = stages(self.settings, spec)
        _zero_counters(self.work, [source, *tiers])
        for i in range(self.workers):
            self.parts.append(
                CommandWorker(
                    self.settings, spec, source, action, self.pool, self.instance, self.stop, f"w{i}", self.batch_max
                )
            )
        for stage in tiers:
            self.parts.append(
                CommandWorker(self.settings, spec, stage, action, self.pool, self.instance, self.stop, None, 100)
            )
        for part in self.parts:
            name = getattr(part, "transactional_id", type(part).__name__)
            thread = threading.Thread(target=self._guard, args=(part,), name=name, daemon=True)
            thread.start()
            self._threads.append(thread)

    def not_ready(self) -> str | None:
        """Why this process is not ready (None: it is): every part running, the dispatcher caught up."""
        if self.errors:
            return f"stopped: {self.errors[0]}"
        if not self._threads:
            return "starting"
        for thread in self._threads:
            if not thread.is_alive():
                return f"{thread.name} is not running"
        dispatchers = [p for p in self.parts if isinstance(p, Dispatcher)]
        return next((r for r in (d.not_ready() for d in dispatchers) if r is not None), None)

    def _guard(self, part: Any) -> None:
        try:
            part.run()
        except BaseException as exc:  # reported by the main thread, which stops the rest
            self.errors.append(exc)
            self.stop.set()

    def close(self, timeout_s: float = 30.0) -> None:
        self.stop.set()
        for thread in self._threads:
            thread.join(timeout_s)
        self.pool.shutdown(wait=False, cancel_futures=True)
