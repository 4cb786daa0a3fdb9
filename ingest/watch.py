"""Watch adapters: LIST then WATCH one kind and publish every change into the cache log.

Per kind, like client-go's reflector:

    LIST (paginated) ──publish the differences from what was published before, then SYNCED──┐
      ▲                                                                                     │
      │ 410 Gone, or any gap the watch cannot bridge                                         ▼
      └────────────── WATCH from the list's resourceVersion (bookmarks on) ◀── reconnect from
                                                                               the last version seen

The adapter remembers what it published (identity -> uid and resourceVersion). A relist
publishes MODIFIED for objects whose resourceVersion changed, ADDED for new ones and DELETED for
those that vanished, so no deletion is lost while the watch was down. At start that memory is
rebuilt from the cache log itself, so a restarted adapter republishes nothing unchanged.
A record that cannot be published stops the adapter: the log must never skip a change.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import Counter
from urllib3.exceptions import HTTPError

from strata.errors import StrataError
from strata.kubeapi import RESOURCES, ApiError, Gone, KubeApi, Resource
from strata.log.cachelog import CacheLogReader, CacheLogWriter
from strata.schemas import Synced, WatchEvent, objectjson
from strata.schemas.redaction import redact

RELISTS = Counter("strata_watch_relists", "Full LISTs of a kind (at start, after a watch ends or fails).", ["kind"])
RESTARTS = Counter(
    "strata_watch_restarts",
    "Watches that ended and were started again, by kind and why (ended, gone: 410, error: API or network).",
    ["kind", "reason"],
)

Identity = tuple[str, str, str]  # kind, namespace ("" when cluster-scoped), name
PAGE = 500
WATCH_SECONDS = 300  # the server ends a watch after this; we reconnect from the last version
READ_TIMEOUT = 90.0  # bookmarks come about once a minute: silence longer than this is a dead connection


@dataclass
class Published:
    uid: str | None
    resource_version: str | None


@dataclass
class AdapterStats:
    lists: int = 0
    watches: int = 0
    published: int = 0
    gone: int = 0
    reconnects: int = 0
    synced: set[str] = field(default_factory=set)


def memory_from_log(reader: CacheLogReader, kinds: Iterable[str]) -> dict[str, dict[Identity, Published]]:
    """What the cache log says was published last for each object, by kind."""
    wanted = set(kinds)
    memory: dict[str, dict[Identity, Published]] = {k: {} for k in wanted}
    for entry in reader.read():
        record = entry.record
        if isinstance(record, WatchEvent) and record.kind in wanted:
            identity = (record.kind, record.namespace or "", record.name)
            if record.op == "DELETED":
                memory[record.kind].pop(identity, None)
            else:
                memory[record.kind][identity] = Published(record.uid, record.resource_version)
    return memory


class KindAdapter:
    def __init__(
        self,
        resource: Resource,
        api: KubeApi,
        writer: CacheLogWriter,
        memory: dict[Identity, Published],
        stop: threading.Event,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.resource = resource
        self.api = api
        self.writer = writer
        self.memory = memory
        self.stop = stop
        self.clock = clock
        self.stats = AdapterStats()

    def run(self) -> None:
        kind = self.resource.kind
        for reason in ("ended", "gone", "error"):  # exported at 0 from the start, for rate()
            RESTARTS.labels(kind, reason)
        while not self.stop.is_set():
            try:
                RELISTS.labels(kind).inc()
                self.watch(self.relist())
                RESTARTS.labels(kind, "ended").inc()
            except Gone:
                self.stats.gone += 1  # the watch history moved past us: list again
                RESTARTS.labels(kind, "gone").inc()
            except (ApiError, OSError, HTTPError) as exc:
                # An API server restarting or overloaded: wait and list again. A refusal
                # (401, 403, 404) or anything else is for a person to fix: stop loudly.
                if isinstance(exc, ApiError) and exc.status < 500 and exc.status != 429:
                    raise
                self.stats.reconnects += 1
                RESTARTS.labels(kind, "error").inc()
                self.stop.wait(1.0)

    # ------------------------------------------------------------------------------------ list
    def relist(self) -> str:
        seen: set[Identity] = set()
        token = None
        resource_version = ""
        while True:
            page = self.api.list_page(self.resource, PAGE, token)
            metadata = page.get("metadata") or {}
            resource_version = resource_version or metadata.get("resourceVersion") or ""
            for item in page.get("items") or []:
                # List items carry no apiVersion or kind; the cache log's objects must.
                obj = {"apiVersion": self.resource.api_version, "kind": self.resource.kind, **item}
                identity = self._identity(obj)
                seen.add(identity)
                meta: dict[str, Any] = obj.get("metadata") or {}
                known = self.memory.get(identity)
                if known is None:
                    self._publish("ADDED", obj, "relist")
                elif known.resource_version != meta.get("resourceVersion") or known.uid != meta.get("uid"):
                    self._publish("MODIFIED", obj, "relist")
            token = metadata.get("continue")
            if not token:
                break
        for identity in [i for i in self.memory if i not in seen]:
            known = self.memory[identity]
            kind, namespace, name = identity
            meta = {"name": name, "uid": known.uid, "resourceVersion": known.resource_version}
            if namespace:
                meta["namespace"] = namespace
            self._publish(
                "DELETED", {"apiVersion": self.resource.api_version, "kind": kind, "metadata": meta}, "relist"
            )
        self.writer.append(Synced(self.resource.kind))
        self.writer.flush()
        self.stats.lists += 1
        self.stats.synced.add(self.resource.kind)
        return resource_version

    # ----------------------------------------------------------------------------------- watch
    def watch(self, resource_version: str) -> None:
        """Follow changes until ``stop``; reconnects from the last version seen, raises Gone."""
        while not self.stop.is_set():
            self.stats.watches += 1
            try:
                for event in self.api.watch(self.resource, resource_version, WATCH_SECONDS, READ_TIMEOUT):
                    if self.stop.is_set():
                        return  # a change seen after stop is left for the next start's relist
                    resource_version = self._on_event(event, resource_version)
            except Gone:
                raise
            except StrataError:
                raise
            except Exception:  # a dead or reset connection: continue from where we were
                self.stats.reconnects += 1
                time.sleep(0.2)

    def _on_event(self, event: Any, resource_version: str) -> str:
        kind = event.get("type") if isinstance(event, dict) else None
        obj = event.get("object") if isinstance(event, dict) else None
        if kind == "ERROR":
            if isinstance(obj, dict) and obj.get("code") == 410:
                raise Gone(410, str(obj.get("message")))
            raise StrataError(f"watch of {self.resource.kind} failed: {obj}")
        if not isinstance(obj, dict):
            return resource_version
        version = (obj.get("metadata") or {}).get("resourceVersion") or resource_version
        if kind in ("ADDED", "MODIFIED", "DELETED"):
            obj.setdefault("apiVersion", self.resource.api_version)
            obj.setdefault("kind", self.resource.kind)
            self._publish(kind, obj, "watch")
        return version  # BOOKMARK included: it only moves the version on

    # --------------------------------------------------------------------------------- publish
    def _identity(self, obj: dict[str, Any]) -> Identity:
        meta = obj.get("metadata") or {}
        return (self.resource.kind, meta.get("namespace") or "", meta.get("name") or "")

    def _publish(self, op: str, obj: dict[str, Any], how: str) -> None:
        meta = obj.get("metadata") or {}
        identity = self._identity(obj)
        event = WatchEvent(
            op=op,
            api_version=self.resource.api_version,
            kind=self.resource.kind,
            namespace=identity[1] or None,
            name=identity[2],
            uid=meta.get("uid") if isinstance(meta.get("uid"), str) else None,
            resource_version=meta.get("resourceVersion") if isinstance(meta.get("resourceVersion"), str) else None,
            observed_time_ms=int(self.clock() * 1000),
            source=f"{how}/{self.resource.kind}",
            object=objectjson.dumps_parsed(redact(obj)),
        )
        self.writer.append(event)
        if op == "DELETED":
            self.memory.pop(identity, None)
        else:
            self.memory[identity] = Published(event.uid, event.resource_version)
        self.stats.published += 1


class Ingest:
    """Every adapter in one process, each on its own thread, all into one idempotent producer."""

    def __init__(self, settings: Any, kinds: Iterable[str] | None = None) -> None:
        names = list(kinds or RESOURCES)
        unknown = [k for k in names if k not in RESOURCES]
        if unknown:
            raise StrataError(f"unknown kind {unknown[0]!r}; kinds are {', '.join(RESOURCES)}")
        self.stop = threading.Event()
        self.api = KubeApi(settings.kubeconfig)
        self.writer = CacheLogWriter(settings)
        self.writer.require()  # a missing topic is one line now, not an adapter thread's late failure
        memory = memory_from_log(CacheLogReader(settings), names)
        self.adapters = [KindAdapter(RESOURCES[k], self.api, self.writer, memory[k], self.stop) for k in names]
        self.errors: list[BaseException] = []
        self._threads: list[threading.Thread] = []

    def start(self) -> None:
        for adapter in self.adapters:
            thread = threading.Thread(target=self._run, args=(adapter,), name=f"watch-{adapter.resource.kind}")
            thread.daemon = True
            thread.start()
            self._threads.append(thread)

    def _run(self, adapter: KindAdapter) -> None:
        try:
            adapter.run()
        except BaseException as exc:  # reported by the main thread, which stops the rest
            self.errors.append(exc)
            self.stop.set()

    def synced(self) -> bool:
        return all(a.resource.kind in a.stats.synced for a in self.adapters)

    def not_ready(self) -> str | None:
        """Why ingest is not ready (None: every kind listed in full and SYNCED published)."""
        if self.errors:
            return f"stopped: {self.errors[0]}"
        waiting = [a.resource.kind for a in self.adapters if a.resource.kind not in a.stats.synced]
        return f"listing {', '.join(waiting)}" if waiting else None

    def close(self, timeout_s: float = 5.0) -> None:
        """Stop every adapter and flush. A thread still blocked reading its watch is left behind
        (it is a daemon and publishes nothing once ``stop`` is set)."""
        self.stop.set()
        deadline = time.monotonic() + timeout_s
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        self.writer.flush()
