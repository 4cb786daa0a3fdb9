"""Where the pages' data comes from: the timeline's snapshots, the audit index, the digests topic.

Every method is synchronous and may wait on the broker or the database; the routes call them in
a worker thread. None of them writes to the cluster or the log.
"""

from __future__ import annotations

import bisect
import gc
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from strata.audit.diff import diff
from strata.audit.history import Position, history, iso, story, version_at
from strata.audit.why import explain_snapshot
from strata.errors import StrataError
from strata.log.config import Settings
from strata.log.digests import compared_versions, digests_from, divergences
from strata.projector.auditindex.store import AuditIndex
from strata.projector.fold.explain import quantity
from strata.projector.fold.kinds import PodView
from strata.projector.fold.snapshot import Snapshot
from strata.projector.runner import LogRunner
from strata.schemas import Digest
from strata.ui import views
from strata.ui.charts import Chart, step_chart
from strata.ui.clock import Clock
from strata.ui.derived import Figures, FiguresCache
from strata.ui.timeline import Timeline

HISTORIES_KEPT = 64  # subjects whose whole history is kept
WHYS_KEPT = 256  # why answers kept, per version and subject
NEAR_REACH = 16_384  # records between a version and kept figures worth advancing for one job or node
GANG_SERIES = (("pods", "pods"), ("placed", "placed"), ("running", "running"))
NODE_SERIES = (("cpu", "cpu requested"), ("memory", "memory requested"))


@dataclass(frozen=True)
class At:
    """The version a page shows, and whether it follows the log's end."""

    version: int
    live: bool


class Source:
    def __init__(self, settings: Settings, runner: LogRunner, index: AuditIndex, timeline: Timeline) -> None:
        self.settings = settings
        self.runner = runner
        self.index = index
        self.timeline = timeline
        self.clock = Clock(index, runner.identity)
        self.figures = FiguresCache(landmarks=timeline.survey.figures_near)
        self.digests = DigestBook(settings)
        self._heat_rows: views.HeatRows = {}
        self._whys: OrderedDict[tuple[int, str, str, str], dict[str, Any]] = OrderedDict()
        self._histories_lock = threading.Lock()
        # (kind, name) -> (the index's position, the subject's history up to it)
        self._histories: OrderedDict[tuple[str, str], tuple[int, list[dict[str, Any]]]] = OrderedDict()

    def warm(self) -> None:
        """Count the live version's figures and index its tasks before the first page asks (two
        passes over every task: later versions advance from them)."""
        self.figures.of(self.timeline.live_snapshot(), self.timeline.written).index()
        gc.freeze()  # they live on: see gctune.FREEZE_EVERY

    def figures_of(self, snapshot: Snapshot) -> Figures:
        """The version's figures (tasks by status per job and queue, tasks by job and node),
        advanced from a nearby version's by the tasks the folds wrote in between."""
        return self.figures.of(snapshot, self.timeline.written)

    def tasks_of(
        self, snapshot: Snapshot, *, job: str | None = None, node: str | None = None
    ) -> list[tuple[str, PodView]]:
        """A job's or a node's tasks: from the version's task index, when its figures are kept
        or a short advance away and carry one (the live version's do, and so the versions
        advanced from it); else one pass over the tasks (30-50 ms at 150,000 pods, where figures
        advanced from a version far off, their index with them, cost more, and an index built
        anew 110 ms)."""
        figures = self.figures.near(snapshot, self.timeline.written, reach=NEAR_REACH) if job or node else None
        index = figures.kept_index() if figures is not None else None
        if index is None:
            return views.tasks_where(snapshot, job=job, node=node)
        return views.tasks_among(snapshot, index.by_job.get(job, ()) if job else index.by_node.get(node or "", ()))

    # --------------------------------------------------------------------------- versions
    def at(self, v: str | None, at: str | None) -> At:
        """``?v=VERSION``, or ``?at=OFFSET|TIME`` as the CLI's ``--at``; neither: the live version."""
        live = self.timeline.live_version
        if v not in (None, "", "live"):
            try:
                version = int(v)
            except ValueError:
                raise StrataError(f"v={v!r} is not a version (a number of records)") from None
            if not 0 <= version <= live:
                raise StrataError(f"version {version} is not in the log (0 to {live})")
            return At(version, version == live)
        if at:
            return At(min(version_at(self.runner.reader, Position.parse(at), live), live), False)
        return At(live, True)

    def snapshot(self, at: At) -> Snapshot:
        return self.timeline.live_snapshot() if at.live else self.timeline.snapshot(at.version)

    def frame(self, at: At) -> dict[str, Any]:
        """What every page shows around its content: the version, its time, the live end, the index."""
        live = self.timeline.live_version
        time_ms = self.timeline.live_time_ms if at.version == live else self.clock.time_of(at.version)
        if time_ms is None:
            time_ms = self.clock.time_of(at.version)
        return {
            "version": at.version,
            "live": at.live,
            "end": live,
            "time": iso(time_ms) if time_ms is not None else None,
            "indexed": self.index.indexed_to(self.runner.identity),
            "fast": self.timeline.fast_versions(),
        }

    # ------------------------------------------------------------------------------ pages
    def cluster(self, at: At, jobs: views.JobFilter, node_text: str) -> dict[str, Any]:
        snapshot = self.snapshot(at)
        return views.cluster(snapshot, self.figures_of(snapshot), jobs, node_text, self._heat_rows)

    def history(self, kind: str, name: str, at: At) -> list[dict[str, Any]]:
        """`strata history KIND NAME --until` the chosen version, as `-o json` prints it.

        A subject's whole indexed history is read once per position of the index and kept
        (a node's is hundreds of entries, tens of ms to read and decode); the history until a
        version is its prefix: an entry depends only on the entries before it."""
        if at.version == 0:
            return []
        indexed = self.index.indexed_to(self.runner.identity)
        if at.version > indexed:  # beyond what the index holds: as the CLI reads it
            return history(self.index, self.runner.identity, kind, name, None, Position(offset=at.version - 1))
        key = (kind, name)
        with self._histories_lock:
            kept = self._histories.get(key)
            if kept is not None:
                self._histories.move_to_end(key)
        if kept is None or kept[0] != indexed:
            full = history(self.index, self.runner.identity, kind, name, None, Position(offset=indexed - 1))
            kept = (indexed, full)
            with self._histories_lock:
                self._histories[key] = kept
                while len(self._histories) > HISTORIES_KEPT:
                    self._histories.popitem(last=False)
        entries = kept[1]
        return entries[: bisect.bisect_right(entries, at.version - 1, key=lambda e: int(e["offset"]))]

    def job(self, at: At, namespace: str, name: str) -> dict[str, Any]:
        key = f"{namespace}/{name}"
        snapshot = self.snapshot(at)
        tasks = self.tasks_of(snapshot, job=key)
        items = self.history("job", key, at)
        pg = snapshot.podgroups.get(key)
        series = views.gang_series(items)
        return {
            "version": at.version,
            "key": key,
            "job": views.job_entry(snapshot, key, tasks),
            "tasks": [views.task_entry(uid, t) for uid, t in tasks],
            "history": items,
            "story": story(key, items),
            "gang": series,
            "minMember": pg.min_member if pg is not None else None,
            "why": self.why(snapshot, "job", namespace, name),
        }

    def gang_chart(self, data: dict[str, Any]) -> Chart:
        return step_chart(
            data["gang"], GANG_SERIES, x_end=data["version"], marker=data["version"], floor=data["minMember"] or 0
        )

    def pod(self, at: At, namespace: str, name: str) -> dict[str, Any]:
        snapshot = self.snapshot(at)
        items = self.history("pod", f"{namespace}/{name}", at)
        uids = [e["uid"] for e in items if e.get("kind") == "Pod" and e.get("uid")]
        task = snapshot.tasks.get(uids[-1]) if uids else None
        if task is not None and (task.namespace, task.name) != (namespace, name):
            task = None
        return {
            "version": at.version,
            "key": f"{namespace}/{name}",
            "task": views.task_entry(uids[-1], task) if task is not None else None,
            "job": task.job if task is not None else None,
            "history": items,
            "why": self.why(snapshot, "pod", namespace, name),
        }

    def node(self, at: At, name: str) -> dict[str, Any]:
        snapshot = self.snapshot(at)
        tasks = self.tasks_of(snapshot, node=name)
        items = self.history("node", name, at)
        return {
            "version": at.version,
            "name": name,
            "node": views.node_entry(snapshot, name, tasks),
            "tasks": [views.task_entry(uid, t) for uid, t in tasks],
            "history": items,
            "usage": views.node_usage_series(items, tasks, name),
        }

    def usage_chart(self, data: dict[str, Any], resource: str) -> Chart:
        label = dict(NODE_SERIES)[resource]
        allocatable = ((data["node"] or {}).get("allocatable") or {}).get(resource, 0)
        return step_chart(
            data["usage"],
            ((resource, label),),
            x_end=data["version"],
            marker=data["version"],
            floor=allocatable,
            y_format=lambda v: quantity(resource, int(v)),
        )

    def why(self, snapshot: Snapshot, kind: str, namespace: str, name: str) -> dict[str, Any]:
        """`strata why KIND NS/NAME -o json` at the snapshot's version."""
        key = (snapshot.version, kind, namespace, name)
        with self._histories_lock:
            kept = self._whys.get(key)
        if kept is not None:
            return kept
        answer = explain_snapshot(self.runner, self.index, snapshot, kind, namespace, name).to_json()
        # an answer is the version's for good once the index covers it (it reads the index up to the version)
        if snapshot.version <= self.index.indexed_to(self.runner.identity):
            with self._histories_lock:
                self._whys[key] = answer
                while len(self._whys) > WHYS_KEPT:
                    self._whys.popitem(last=False)
        return answer

    def replicas(self) -> dict[str, Any]:
        return self.digests.report()

    # ------------------------------------------------------------------- the CLI's shapes
    def canonical(self, at: At) -> dict[str, Any]:
        """`strata snapshot -o json`: the whole cache (seconds at 150,000 pods: not a page)."""
        return self.snapshot(at).to_json()

    def diff(self, a: At, b: At) -> dict[str, Any]:
        """`strata diff A B -o json`."""
        return diff(self.snapshot(a).to_json(), self.snapshot(b).to_json())


class DigestBook:
    """The digests readers reported (the compacted digests topic), read on from where the last
    look stopped: `strata verify --replicas`'s data, kept up to date cheaply."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._lock = threading.Lock()
        self._read_to = 0
        self._latest: dict[tuple[str, int, str], Digest] = {}

    def report(self) -> dict[str, Any]:
        with self._lock:
            for offset, digest in digests_from(self.settings, self._read_to, timeout_s=5.0):
                self._latest[(digest.fold, digest.version, digest.replica)] = digest
                self._read_to = offset + 1
            digests = list(self._latest.values())
        by_version: dict[tuple[str, int], dict[str, str]] = {}
        for report in digests:
            by_version.setdefault((report.fold, report.version), {})[report.replica] = report.digest
        found = {(d.fold, d.version): d for d in divergences(digests)}
        versions = []
        for (fold, version), reports in sorted(by_version.items(), key=lambda kv: (-kv[0][1], kv[0][0])):
            split = found.get((fold, version))
            versions.append(
                {
                    "version": version,
                    "fold": fold,
                    "reports": dict(sorted(reports.items())),
                    "agree": split is None,
                    "majority": split.majority if split is not None else next(iter(reports.values())),
                    "dissenters": list(split.dissenters) if split is not None else [],
                }
            )
        return {
            "versions": versions,
            "readers": sorted({d.replica for d in digests}),
            "compared": compared_versions(digests),
            "divergent": len(found),
        }
