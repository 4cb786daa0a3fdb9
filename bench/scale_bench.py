"""Benchmark: the projector at the scale where Volcano hurts (issue 13), in one table.

    eval "$(.venv/bin/strata dev up --no-kube)"
    .venv/bin/python bench/scale_bench.py [--nodes 5000] [--pods 150000] [--trace PATH]
                                          [--load-seconds 600] [--rate 5000] [--json PATH]

On one generated history (`strata gen`) of R records, every figure is measured in the same run,
each process timed whole (wall clock, start to exit), on the local broker and a fresh topic prefix:

* floor: stdlib ``json.loads`` over the R lines, a process of its own;
* replay: ``strata replay --digest`` of the R lines (digest D);
* publish the first E = R - 1,000 records (``strata ingest --from``);
* project: ``strata project --stop-at-end`` with its defaults (a checkpoint every 100,000 records,
  the audit index, digests), into a fresh SQLite database; it prints its longest pause (the
  bookkeeping between two records: forking the writer, settling and reporting the digest) and its
  longest digest report;
* publish the last 1,000 records;
* pure fold: ``strata snapshot --digest`` of all R records from the broker with no checkpoint;
* project without its audit index (``--no-audit``), over all R records into a fresh database, in
  every round after the pure fold: no pass line, printed with the figures below the table
  (``project_no_audit_over_pure``): how much of project's time over the pure fold's is the index's;
* cold start: ``strata snapshot --digest`` from project's last checkpoint plus the 1,000-record
  tail, and a replica's ``Cache.wait_for_cache_sync`` from the same (time and peak RSS);
* the audit index's bytes per record (SQLite's dbstat over the audit tables) and ``strata history``
  latency for sampled pods, jobs and nodes;
* load (``--load-seconds``, 0 to skip): ``strata project`` with its defaults follows while records
  are appended at ``--rate`` for that long (pods of the state deleted and re-created, bound and
  running again, so the state keeps its size); its reported lag (p50/p99, as records and as time
  at the rate), its RSS 60 s into the load (the restored fragments dropped, every restored
  object hashed) and at the end, and its longest pause (the table's pause is the longer of the
  catch-up's and the load's; both projectors log each pause over 50 ms step by step, kept in
  the JSON as ``project_long_pauses`` and ``load_long_pauses``).

Determinism: the replay, the pure fold from the broker and the cold start from a checkpoint must
print the same digest D. Rates, not times, are compared (project folds E records, the others R).
Each pass line is also applied to a deliberately wrong set of figures, which must fail every one.

Rounds (``--rounds``, 2 by default): this 2-core machine's phases move one process's time by
10-20 % from one minute to the next, so a ratio of two single runs passed or failed with the
phase. Each timed step is run once per round, its sides alternated (floor, replay, floor,
replay; after the first round's steps above, project again over all R records into a fresh
database, then the pure fold again), and each ratio compares the fastest run of each side, as
``timeit`` does; every run's time is kept in the JSON (``*_runs``). Pauses and digest reports
take the worst of every project run, and every run's digest must be D.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from strata.dev.faults.common import STRATA, env_for, percentile, rss_mb
from strata.dev.gen import cycle_lines, generate
from strata.log.cachelog import CacheLogWriter
from strata.log.config import Settings, settings_from
from strata.log.topics import drop_topics, ensure_topics
from strata.projector.replay import replay_file
from strata.schemas import objectjson
from strata.schemas.trace import record_from_json

TAIL = 1000
LONG_PAUSE = re.compile(r"(a pause of [\d.]+ ms at version \d+: .*)$", re.MULTILINE)  # runner.LONG_PAUSE_S, INFO
STOPPED = re.compile(
    r"longest pause ([\d.]+) ms, longest digest ([\d.]+) ms, waited ([\d.]+) s for the audit writer; "
    r"the stop took ([\d.]+) s"
)
PAUSED = re.compile(r"the fold's pauses in all, by step: (.*)$", re.MULTILINE)
WARM_S = 60  # the load's RSS is compared from here on: the first checkpoint has dropped the
# restored fragments and the state digest has hashed every restored object (both by then)

FLOOR = r"""
import json, sys
with open(sys.argv[1], "rb", buffering=1 << 20) as f:
    for line in f:
        try:
            json.loads(line)
        except ValueError:
            pass
"""

REPLICA = r"""
import json, resource, sys, threading, time
t0 = time.perf_counter()
from strata.log.config import settings_from
from strata.projector.checkpoints.sql import SqlCheckpointStore
from strata.scheduler.cache import LogCache
settings = settings_from()
cache = LogCache(settings, "scale-bench", SqlCheckpointStore(sys.argv[1]))
stop = threading.Event()
t1 = time.perf_counter()
cache.run(stop)
cache.wait_for_cache_sync(stop)
t2 = time.perf_counter()
version = cache.version
stop.set()
print(json.dumps({"sync_s": t2 - t1, "process_to_sync_s": t2 - t0, "version": version,
                  "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


@dataclass
class Timed:
    seconds: float
    rss_mb: float
    out: str
    err: str
    cpu: dict[str, float] = field(default_factory=dict)  # CpuWatch.shares: where its CPU went


class CpuWatch:
    """Where a process's CPU goes, by the part that spends it: its main thread (the fold's),
    the whole process, and its helpers by their command line (the log's reader, the audit index's
    writer); what the process's waited-for descendants spent beyond these (the checkpoints'
    forked children, mostly) is the total ``wait4`` gives less the parts. Sampled from /proc
    every SAMPLE_S until the process exits (a helper's last SAMPLE_S may be missed)."""

    SAMPLE_S = 0.1
    HELPERS: ClassVar[dict[bytes, str]] = {
        b"strata.log.readahead": "reader",
        b"strata.projector.auditindex.writer": "audit writer",
    }

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.ticks: dict[int, int] = {}
        self.roles: dict[int, str] = {}
        self.main_ns = 0
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.done.wait(self.SAMPLE_S):
            try:
                with open(f"/proc/{self.pid}/task/{self.pid}/schedstat") as f:
                    self.main_ns = int(f.read().split()[0])
            except OSError:
                return
            for pid in self._tree():
                try:
                    with open(f"/proc/{pid}/stat") as f:
                        fields = f.read().rsplit(")", 1)[1].split()
                    # a helper seen between its fork and its exec still shows its parent's
                    # command line: looked at again until it shows its own
                    if self.roles.get(pid, "other") == "other":
                        with open(f"/proc/{pid}/cmdline", "rb") as f:
                            cmdline = f.read()
                        role = next((r for k, r in self.HELPERS.items() if k in cmdline), "other")
                        self.roles[pid] = "process" if pid == self.pid else role
                except OSError:
                    continue
                self.ticks[pid] = int(fields[11]) + int(fields[12])

    def _tree(self) -> list[int]:
        found, todo = [], [self.pid]
        while todo:
            pid = todo.pop()
            found.append(pid)
            for children in Path(f"/proc/{pid}/task").glob("*/children"):
                with contextlib.suppress(OSError):  # a thread or process gone meanwhile
                    todo.extend(int(c) for c in children.read_text().split())
        return found

    def shares(self, total_s: float) -> dict[str, float]:
        """CPU seconds by part, once the process has exited (``total_s``: its ``wait4`` usage)."""
        self.done.set()
        self.thread.join()
        tick = os.sysconf("SC_CLK_TCK")
        out = {"fold thread": self.main_ns / 1e9, "total": total_s}
        for pid, ticks in self.ticks.items():
            role = self.roles[pid]
            out[role] = out.get(role, 0.0) + ticks / tick
        out["checkpoints and other"] = max(0.0, total_s - sum(v for k, v in out.items() if k in _PARTS))
        order = ("fold thread", *_PARTS, "checkpoints and other", "total")
        return {k: out[k] for k in order if k in out}


_PARTS = ("process", "reader", "audit writer")


def timed(argv: list[str], env: dict[str, str] | None = None) -> Timed:
    """Run a process to its end: its wall time, its own peak RSS, where its CPU went."""
    started = time.perf_counter()
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    watch = CpuWatch(proc.pid)
    out: list[bytes] = []
    err: list[bytes] = []
    readers = [
        threading.Thread(target=lambda s=stream, into=into: into.append(s.read()), daemon=True)
        for stream, into in ((proc.stdout, out), (proc.stderr, err))
    ]
    for reader in readers:
        reader.start()
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - started
    for reader in readers:
        reader.join()
    proc.returncode = os.waitstatus_to_exitcode(status)
    cpu = watch.shares(usage.ru_utime + usage.ru_stime)
    result = Timed(seconds, usage.ru_maxrss / 1024, b"".join(out).decode(), b"".join(err).decode(), cpu)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv[:3])} failed ({proc.returncode}): {result.err.strip()[-500:]}")
    return result


def split(trace: Path, head: Path, tail: Path, tail_lines: int) -> tuple[int, int]:
    """Write the first lines and the last ``tail_lines`` lines of ``trace`` apart."""
    total = sum(1 for _ in trace.open("rb"))
    with trace.open("rb") as f, head.open("wb") as h, tail.open("wb") as t:
        for i, line in enumerate(f):
            (h if i < total - tail_lines else t).write(line)
    return total - tail_lines, total


def audit_bytes(db: Path) -> int:
    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT name, SUM(pgsize) FROM dbstat GROUP BY name").fetchall()
    return sum(size for name, size in rows if "audit" in name)


def history_latency(env: dict[str, str], subjects: list[tuple[str, str]]) -> list[float]:
    seconds = []
    for kind, name in subjects:
        seconds.append(timed([STRATA, "history", kind, name], env).seconds)
    return seconds


def sample_subjects(trace: Path, lines: int) -> list[tuple[str, str]]:
    """A few pods, jobs and nodes of the history, spread over it."""
    stride = max(1, lines // 97)
    pods, jobs, nodes = [], [], []
    pod = re.compile(rb'"kind":"Pod","metadata":\{[^{}]*?"name":"([^"]+)","namespace":"([^"]+)"')
    job = re.compile(rb'"scheduling.k8s.io/group-name":"([^"]+)"')
    node = re.compile(rb'"nodeName":"([^"]+)"')
    with trace.open("rb") as f:
        for i, line in enumerate(f):
            if i % stride:
                continue
            if (m := pod.search(line)) is not None:
                pods.append(("pod", f"{m.group(2).decode()}/{m.group(1).decode()}"))
                if (j := job.search(line)) is not None:
                    jobs.append(("job", f"{m.group(2).decode()}/{j.group(1).decode()}"))
                if (n := node.search(line)) is not None:
                    nodes.append(("node", n.group(1).decode()))
    return pods[:4] + jobs[:3] + nodes[:3]


# ---------------------------------------------------------------------------------------- load
def load(settings: Settings, env: dict[str, str], cycles: list[bytes], rate: int, seconds: float) -> dict[str, Any]:
    """Follow with `strata project` while ``rate`` records/s are appended for ``seconds``."""
    proc = subprocess.Popen([STRATA, "project"], env=env, stderr=subprocess.PIPE, text=True)
    lags: list[tuple[float, int]] = []
    stopped: list[str] = []
    pauses: list[str] = []

    def read() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            if (m := re.match(r"version (\d+) lag (\d+)", line)) is not None:
                lags.append((time.monotonic(), int(m.group(2))))
            elif line.startswith("stopped at version"):
                stopped.append(line.strip())
            elif (p := LONG_PAUSE.search(line)) is not None:
                pauses.append(p.group(1))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    while not lags or lags[-1][1] > rate:  # caught up with what is there
        time.sleep(1)
        if proc.poll() is not None:
            raise SystemExit("the load's projector ended early")
    writer = CacheLogWriter(settings)
    records = [record_from_json(objectjson.loads(line), "load") for line in cycles]
    started = time.monotonic()
    published = 0
    rss_start = 0.0
    while (now := time.monotonic()) - started < seconds:
        if not rss_start and now - started >= WARM_S:
            rss_start = rss_mb(proc.pid)
        due = int((now - started) * rate)
        while published < due:
            writer.append(records[published % len(records)])
            published += 1
        time.sleep(0.005)
    writer.flush()
    time.sleep(10)  # its last reports
    rss_end = rss_mb(proc.pid)
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=600)
    reader.join(10)
    during = sorted(lag for at, lag in lags if started + 10 <= at <= started + seconds)
    return {
        "load_seconds": seconds,
        "load_rate": rate,
        "load_published": published,
        "load_reports": len(during),
        "load_lag_p50_records": percentile(during, 50),
        "load_lag_p99_records": percentile(during, 99),
        "load_lag_p99_ms": percentile(during, 99) / rate * 1000,
        "load_rss_start_mb": rss_start,
        "load_rss_end_mb": rss_end,
        "load_rss_growth": rss_end / rss_start if rss_start else 0.0,
        "load_stopped": stopped[-1] if stopped else "",
        "load_long_pauses": pauses,
    }


# ----------------------------------------------------------------------------------- pass lines
Limit = tuple[str, str, float, Callable[[float, float], bool]]  # figure, shown as, limit, holds
LIMITS: list[Limit] = [
    ("project_over_pure", "project (defaults) / pure fold from the broker, per record", 1.25, lambda v, lim: v <= lim),
    ("pure_over_replay", "pure fold from the broker / offline replay, per record", 1.25, lambda v, lim: v <= lim),
    ("replay_over_floor", "offline replay / JSON floor, whole process", 2.0, lambda v, lim: v <= lim),
    ("longest_pause_ms", "longest fold pause, catch-up or load (ms)", 50.0, lambda v, lim: v <= lim),
    ("longest_digest_ms", "longest digest report (ms)", 10.0, lambda v, lim: v <= lim),
    ("audit_bytes_per_record", "audit index bytes per record", 250.0, lambda v, lim: v <= lim),
    ("history_max_s", "strata history, slowest (s)", 1.0, lambda v, lim: v < lim),
    ("cold_snapshot_s", "cold start: snapshot --digest (s)", 3.0, lambda v, lim: v <= lim),
    ("cold_snapshot_rss_mb", "cold start: snapshot RSS (MB)", 600.0, lambda v, lim: v <= lim),
    ("replica_sync_s", "cold start: replica wait_for_cache_sync (s)", 2.0, lambda v, lim: v <= lim),
    ("replica_rss_mb", "cold start: replica RSS (MB)", 600.0, lambda v, lim: v <= lim),
    ("load_lag_p99_ms", "load: p99 lag (ms)", 500.0, lambda v, lim: v <= lim),
    ("load_rss_growth", "load: RSS end / after catch-up", 1.10, lambda v, lim: v <= lim),
    ("digests_equal", "replay = pure fold = checkpoint+tail digest", 1.0, lambda v, lim: v == lim),
]


def verdicts(figures: dict[str, Any]) -> list[tuple[str, float, float, bool]]:
    return [(shown, figures[key], lim, holds(figures[key], lim)) for key, shown, lim, holds in LIMITS if key in figures]


def controls_caught(figures: dict[str, Any]) -> tuple[int, int]:
    """Every pass line applied to figures each made wrong on purpose: how many it fails."""
    wrong = {key: (0.0 if key == "digests_equal" else lim * 2 + 1) for key, _, lim, _ in LIMITS if key in figures}
    failed = sum(1 for _, _, _, ok in verdicts(wrong) if not ok)
    return failed, len(wrong)


# ------------------------------------------------------------------------------------------ run
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--pods", type=int, default=150_000)
    parser.add_argument("--trace", type=Path)
    parser.add_argument("--load-seconds", type=float, default=600)
    parser.add_argument("--rate", type=int, default=5000)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--rounds", type=int, default=2, help="runs of each timed step; the fastest counts")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="strata-scale-"))
    trace = args.trace
    if trace is None:
        trace = work / "history.jsonl"
        with trace.open("wb") as out:
            generate(out, nodes=args.nodes, pods=args.pods)
    head, tail = work / "head.jsonl", work / "tail.jsonl"
    e, r = split(trace, head, tail, TAIL)
    f: dict[str, Any] = {"records": r, "trace_bytes": trace.stat().st_size}
    say = lambda msg: print(msg, file=sys.stderr, flush=True)  # noqa: E731

    rounds = max(1, args.rounds)
    say("floor and replay")
    floors, replays = [], []
    for _ in range(rounds):  # alternated, so that a phase of the machine slows both sides alike
        floors.append(timed([sys.executable, "-c", FLOOR, str(trace)]))
        replays.append(timed([STRATA, "replay", str(trace), "--digest"]))
    digest = replays[0].out.strip()
    digests = {r.out.strip() for r in replays}
    f.update(floor_s=min(t.seconds for t in floors), replay_s=min(t.seconds for t in replays))
    f.update(floor_runs=[t.seconds for t in floors], replay_runs=[t.seconds for t in replays])
    f["replay_rss_mb"] = max(t.rss_mb for t in replays)

    settings = settings_from().with_(topic_prefix=f"scale-{uuid.uuid4().hex[:8]}.")
    ensure_topics(settings)
    db = work / "project.db"
    env = env_for(settings, STRATA_DB_URL=f"sqlite:///{db}")
    try:
        say(f"publishing {e} records")
        f["ingest_s"] = timed([STRATA, "ingest", "--from", str(head)], env).seconds
        say("project --stop-at-end")
        project = timed([STRATA, "project", "--stop-at-end"], {**env, "STRATA_LOG_LEVEL": "INFO"})
        stopped = STOPPED.search(project.err)
        assert stopped is not None, project.err[-500:]
        f.update(project_s=project.seconds, project_rss_mb=project.rss_mb)
        f.update(longest_pause_ms=float(stopped.group(1)), longest_digest_ms=float(stopped.group(2)))
        f["project_audit_waits_s"] = float(stopped.group(3))
        f["project_long_pauses"] = LONG_PAUSE.findall(project.err)
        stops = [float(stopped.group(4))]
        f["audit_bytes_per_record"] = audit_bytes(db) / e
        say("history")  # as a running projector leaves the index: current (else history catches it up first)
        latencies = history_latency(env, sample_subjects(head, e))
        f.update(history_max_s=max(latencies), history_median_s=sorted(latencies)[len(latencies) // 2])
        timed([STRATA, "ingest", "--from", str(tail)], env)
        say("pure fold from the broker")
        pure = timed(
            [STRATA, "snapshot", "--digest"], env_for(settings, STRATA_DB_URL=f"sqlite:///{work / 'empty.db'}")
        )
        say("cold start")
        cold = timed([STRATA, "snapshot", "--digest"], env)
        replica = json.loads(timed([sys.executable, "-c", REPLICA, f"sqlite:///{db}"], env).out)
        f.update(cold_snapshot_s=cold.seconds, cold_snapshot_rss_mb=cold.rss_mb)
        f.update(replica_sync_s=replica["sync_s"], replica_process_s=replica["process_to_sync_s"])
        f["replica_rss_mb"] = replica["rss_mb"]
        projects = [(project.seconds, e, project.cpu, paused_of(project.err))]
        pures = [(pure.seconds, pure.cpu)]
        digests |= {pure.out.strip(), cold.out.strip()}
        bare = [no_audit(settings, work / "bare0.db")]
        for n in range(1, rounds):
            say(f"round {n + 1}: project --stop-at-end over all {r} records, then the pure fold")
            again = timed(
                [STRATA, "project", "--stop-at-end"],
                {**env_for(settings, STRATA_DB_URL=f"sqlite:///{work / f'project{n}.db'}"), "STRATA_LOG_LEVEL": "INFO"},
            )
            stopped = STOPPED.search(again.err)
            assert stopped is not None, again.err[-500:]
            f["longest_pause_ms"] = max(f["longest_pause_ms"], float(stopped.group(1)))
            f["longest_digest_ms"] = max(f["longest_digest_ms"], float(stopped.group(2)))
            f["project_long_pauses"] += LONG_PAUSE.findall(again.err)
            stops.append(float(stopped.group(4)))
            projects.append((again.seconds, r, again.cpu, paused_of(again.err)))
            pure = timed(
                [STRATA, "snapshot", "--digest"], env_for(settings, STRATA_DB_URL=f"sqlite:///{work / 'empty.db'}")
            )
            pures.append((pure.seconds, pure.cpu))
            digests.add(pure.out.strip())
            bare.append(no_audit(settings, work / f"bare{n}.db"))
        f["project_longest_pause_ms"] = f["longest_pause_ms"]  # the catch-ups' alone
        f.update(pure_s=min(s for s, _ in pures), pure_runs=[s for s, _ in pures])
        f["project_runs"] = [seconds for seconds, *_ in projects]
        f["project_s_per_record"] = min(seconds / records for seconds, records, *_ in projects)
        f["project_stop_runs"] = stops
        # where each run's CPU went (CpuWatch): the fastest's below the table, every run's in the JSON
        f["project_cpu_runs"] = [{**cpu, "paused": p, "wall": s, "records": n} for s, n, cpu, p in projects]
        f["pure_cpu_runs"] = [{**cpu, "wall": s, "records": r} for s, cpu in pures]
        f.update(project_no_audit_s=min(bare), project_no_audit_runs=bare)
        f["digests_equal"] = float(digests == {digest} and replica["version"] == r)
        if args.load_seconds > 0:
            say(f"load: {args.rate} records/s for {args.load_seconds:g} s")
            state, _ = replay_file(trace)
            running = sum(1 for t in state.tasks.values() if t.status == "Running" and t.node and t.job)
            cycles = cycle_lines(trace, dict(state.tasks.items()), min(20_000, running))
            del state
            f.update(load(settings, {**env, "STRATA_LOG_LEVEL": "INFO"}, cycles, args.rate, args.load_seconds))
            under_load = STOPPED.search(f["load_stopped"])
            f["load_longest_pause_ms"] = float(under_load.group(1)) if under_load is not None else float("inf")
            f["longest_pause_ms"] = max(f["longest_pause_ms"], f["load_longest_pause_ms"])
    finally:
        drop_topics(settings)
    f["replay_over_floor"] = f["replay_s"] / f["floor_s"]
    f["pure_over_replay"] = f["pure_s"] / f["replay_s"]  # both fold all R records
    f["project_over_pure"] = f["project_s_per_record"] / (f["pure_s"] / r)
    f["project_no_audit_over_pure"] = f["project_no_audit_s"] / f["pure_s"]  # both fold all R records
    report(f)
    if args.json:
        args.json.write_text(json.dumps(f, indent=2))


def no_audit(settings: Settings, db: Path) -> float:
    """Seconds of ``strata project --stop-at-end --no-audit`` over all R records into a fresh
    database: not a pass line, the share of project's time its audit index takes."""
    bare = timed([STRATA, "project", "--stop-at-end", "--no-audit"], env_for(settings, STRATA_DB_URL=f"sqlite:///{db}"))
    assert STOPPED.search(bare.err) is not None, bare.err[-500:]
    return bare.seconds


def report(f: dict[str, Any]) -> None:
    print("| figure | value | pass line | |\n|---|---|---|---|")
    for shown, value, lim, ok in verdicts(f):
        print(f"| {shown} | {value:.3g} | {lim:g} | {'ok' if ok else 'FAIL'} |")
    caught, total = controls_caught(f)
    print(f"\ncontrols: {caught}/{total} deliberately wrong figures failed their pass line")
    extras = (
        "records",
        "floor_s",
        "replay_s",
        "pure_s",
        "project_s",
        "project_audit_waits_s",
        "project_no_audit_s",
        "project_no_audit_over_pure",
        "ingest_s",
        "replay_rss_mb",
        "project_rss_mb",
        "load_lag_p50_records",
        "load_rss_start_mb",
        "load_rss_end_mb",
        "project_longest_pause_ms",
        "load_longest_pause_ms",
    )
    print("\n" + ", ".join(f"{k} {f[k]:.4g}" for k in extras if k in f))
    runs = ("floor_runs", "replay_runs", "pure_runs", "project_runs", "project_no_audit_runs")
    print("runs (s): " + "; ".join(f"{k[:-5]} {', '.join(f'{v:.1f}' for v in f[k])}" for k in runs if k in f))
    for line in cpu_lines(f):
        print(line)
    for pause in [*f.get("project_long_pauses", ()), *f.get("load_long_pauses", ())]:
        print(pause)


def cpu_lines(f: dict[str, Any]) -> list[str]:
    """Where the fastest project run's and pure fold's CPU went (no pass line): what a ratio of
    their wall times is made of on this machine's two cores, and what the fold's thread alone
    would make of it with cores to spare."""
    if not f.get("project_cpu_runs") or not f.get("pure_cpu_runs"):
        return []
    project = min(f["project_cpu_runs"], key=lambda c: c["wall"] / c["records"])
    pure = min(f["pure_cpu_runs"], key=lambda c: c["wall"])
    lines = []
    for name, run in (("project", project), ("pure fold", pure)):
        parts = ", ".join(f"{k} {v:.1f}" for k, v in run.items() if k not in ("wall", "records", "paused"))
        shown = f"{run['wall']:.1f} s wall over {run['records']} records"
        lines.append(f"CPU (s) of the fastest {name} run, {shown}: {parts}")
    per_record = project["fold thread"] / project["records"]
    lines.append(
        f"project's fold thread alone / the pure fold's wall: {per_record / (pure['wall'] / pure['records']):.2f}x "
        f"(stops took {', '.join(f'{s:.1f}' for s in f.get('project_stop_runs', ()))} s)"
    )
    paused = project.get("paused", {})  # the fold thread's pauses by step
    if paused:
        steps = ", ".join(f"{step} {seconds:.2f}" for step, seconds in paused.items())
        total = sum(paused.values())
        lines.append(
            f"its fold thread's pauses between records (s, wall): {steps}; {total:.1f} in all, "
            f"the records themselves at most {project['fold thread'] - total:.1f} of its CPU"
        )
    return lines


def paused_of(err: str) -> dict[str, float]:
    """``project``'s pauses by step, from its last line (none: an empty dict)."""
    found = PAUSED.search(err)
    if found is None:
        return {}
    parts = (part.split(" ") for part in found.group(1).split(", "))  # "settle 1.23 s"
    return {step: float(seconds) for step, seconds, _unit in parts}


if __name__ == "__main__":
    main()
