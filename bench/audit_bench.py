"""Benchmark: the audit index on a long log.

    eval "$(.venv/bin/strata dev up --no-kube)"
    .venv/bin/python bench/audit_bench.py [--nodes 3000] [--pods 90000] [--samples 20] [--repeats 3] [--project]

Generates a synthetic history (`strata gen`, about a million records at the defaults) and replays
it offline, the way `strata project` folds the log: per record ``audit.context`` before a
scheduler record, ``audit.pod_refs`` and the feed's ``Packer.add`` after every record, in the
fold's thread, with a frame sealed at every block's end. It measures

- the fold's own cost per record, and what ``context`` + ``pod_refs`` + ``add`` + ``seal`` add to
  it (µs per record, timed around the calls, less the clock's own cost; the better of
  ``--repeats`` runs: two cores are shared, the minimum is the least disturbed);
- the audit writer's work on those frames in batches of ``--flush`` records: reading them (which
  decodes each message to spell its subjects) and
  ``AuditIndex.write`` (records per second of the writer's CPU and of wall time), into SQLite
  and, when ``STRATA_PG_URL`` is set, PostgreSQL;
- bytes per record: the growth of the database over an empty one (SQLite after VACUUM; for
  PostgreSQL ``pg_total_relation_size`` of the audit tables), divided by the records indexed;
- ``strata history pod|job|node`` on sampled subjects (the query behind the command: p50 and max).

With ``--project`` it also publishes the history into a fresh topic prefix and times `strata
project --stop-at-end` without and with the audit (end to end, through Kafka). Prints one JSON
object; deletes its topics and databases.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, text

from strata.audit.history import history
from strata.dev.faults.common import STRATA, env_for
from strata.projector.auditindex.store import BLOCK_RECORDS, AuditIndex, Records
from strata.projector.auditindex.writer import Packer, read_frame
from strata.projector.checkpoints.interface import LogIdentity
from strata.projector.checkpoints.sql import SqlCheckpointStore, normalize_url
from strata.projector.fold import auditentries as audit
from strata.projector.fold.kinds import GROUP_NAME
from strata.projector.fold.state import CacheState
from strata.projector.gctune import tune_for_fold
from strata.schemas import WatchEvent, encode
from strata.schemas.records import LogRecord
from strata.schemas.trace import parse_line, split_lines

LOG = LogIdentity("bench-cache-log", "bench-cluster", "bench-fold")
TIME_MS = 1_700_000_000_000  # a broker stamp for the first record; one millisecond per record after it


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", type=int, default=3000)
    parser.add_argument("--pods", type=int, default=90000)
    parser.add_argument("--samples", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--flush", type=int, default=32 * 1024, help="records per write of the writer")
    parser.add_argument("--trace", type=Path, help="an existing trace instead of generating one")
    parser.add_argument("--project", action="store_true", help="also time `strata project` through Kafka")
    args = parser.parse_args()
    tune_for_fold()  # the collector's settings of the fold and of the writer process
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        trace = args.trace or Path(tmp) / "gen.jsonl"
        if args.trace is None:
            gen = [STRATA, "gen", "--nodes", str(args.nodes), "--pods", str(args.pods), "-o", str(trace)]
            subprocess.run(gen, check=True, stdout=subprocess.DEVNULL)
        records = [parse_line(line, "bench") for _, line in split_lines(trace.read_bytes())]
        out["records"] = len(records)
        frames = _fold(records, args.repeats, out)
        del records
        names = _subjects(trace)
        databases = [("sqlite", f"sqlite:///{tmp}/audit.db")]
        if os.environ.get("STRATA_PG_URL"):
            databases.append(("postgres", ""))
        for label, url in databases:
            with _database(label, url) as db_url:
                out[label] = _store(db_url, label, frames, args)
                out[label]["history"] = _histories(db_url, names, args.samples)
            _progress(out)
        if args.project:
            _project(trace, tmp, out)
    print(json.dumps(out, indent=2))


def _progress(out: dict[str, Any]) -> None:
    print(json.dumps(out), file=sys.stderr)


def _fold(records: Sequence[LogRecord], repeats: int, out: dict[str, Any]) -> list[bytes]:
    """Fold with the audit's per-record calls, timing the calls themselves: the better of ``repeats``."""
    runs = []
    frames: list[bytes] = []
    values = [encode(r) for r in records]  # the messages as the log holds them
    for _ in range(repeats):
        frames = []
        runs.append(_timed_fold(records, values, frames))
        _progress({"fold_s": runs[-1][0], "audit_calls_s": runs[-1][1]})
    n = len(records)
    out["fold_us_per_record"] = round(min(f for f, _ in runs) / n * 1e6, 2)
    out["audit_entry_us_per_record"] = round(min(a for _, a in runs) / n * 1e6, 2)
    out["audit_entry_us_per_record_runs"] = [round(a / n * 1e6, 2) for _, a in runs]
    out["frame_bytes_per_record"] = round(sum(map(len, frames)) / n, 1)
    return frames


def _timed_fold(records: Sequence[LogRecord], values: Sequence[bytes], frames: list[bytes]) -> tuple[float, float]:
    """Seconds in ``apply_at``, and in ``context`` + ``add`` + ``seal`` (less the clock's own cost)."""
    state = CacheState()
    packer = Packer()
    context, add, clock = audit.context, packer.adder(0, lambda _upto: None), time.perf_counter
    gc.collect()
    folding = auditing = 0.0
    for offset, record in enumerate(records):
        t0 = clock()
        ctx = None if type(record) is WatchEvent else context(state, record)
        t1 = clock()
        outcome = state.apply_at(offset, record)
        t2 = clock()
        add(offset, TIME_MS + offset, values[offset], outcome, ctx, audit.pod_refs(record, state.last_object))
        if (offset + 1) % BLOCK_RECORDS == 0 or offset + 1 == len(records):
            frames.append(packer.seal(offset + 1, urgent=False))
        t3 = clock()
        auditing += (t1 - t0) + (t3 - t2)
        folding += t2 - t1
    clocks = _clock_cost(len(records))
    return folding - clocks / 2, auditing - clocks


def _clock_cost(n: int) -> float:
    """What the four clock readings of ``_timed_fold`` cost per record, times ``n`` (two intervals)."""
    clock = time.perf_counter
    best = float("inf")
    for _ in range(3):
        spent = 0.0
        for _ in range(n):
            t0 = clock()
            t1 = clock()
            t2 = clock()
            t3 = clock()
            spent += (t1 - t0) + (t3 - t2)
        best = min(best, spent)
    return best


@contextmanager
def _database(label: str, url: str) -> Iterator[str]:
    if label == "sqlite":
        yield url
        return
    server = normalize_url(os.environ["STRATA_PG_URL"])
    name = f"strata_bench_{uuid.uuid4().hex[:12]}"
    admin = create_engine(server, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
        yield server.set(database=name).render_as_string(hide_password=False)
        with admin.connect() as conn:
            conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        admin.dispose()


def _store(url: str, label: str, frames: Sequence[bytes], args: argparse.Namespace) -> dict[str, Any]:
    """The writer's work on the frames, in batches of ``--flush`` records (one core, as the
    projector's writer process), then the database's growth."""
    store = SqlCheckpointStore(url)
    index = AuditIndex(store.engine)
    empty = _audit_bytes(store, label, url)
    seconds = []
    batch = max(1, args.flush // BLOCK_RECORDS)
    n = 0
    for i in range(0, len(frames), batch):
        started = time.process_time()  # the writer's CPU: the database's own work is another process
        wall = time.perf_counter()
        decoded = [read_frame(f) for f in frames[i : i + batch]]
        records = Records.joined([frame.records for frame in decoded])
        index.write(LOG, records, decoded[-1].upto)
        seconds.append((time.process_time() - started, time.perf_counter() - wall))
        n += len(records)
    again = time.perf_counter()
    first = read_frame(frames[0])
    index.write(LOG, first.records, first.upto)  # a restart rewrites a frame: harmless
    rewrite_s = time.perf_counter() - again
    grown = _audit_bytes(store, label, url) - empty
    store.close()
    return {
        "bytes_per_record": round(grown / n, 1),
        "audit_mb": round(grown / 2**20, 1),
        "write_records_per_s_cpu": round(n / sum(s for s, _ in seconds)),
        "write_records_per_s_wall": round(n / sum(w for _, w in seconds)),
        "rewrite_frame_s": round(rewrite_s, 2),
    }


def _audit_bytes(store: SqlCheckpointStore, label: str, url: str) -> int:
    with store.engine.connect() as conn:
        if label == "postgres":
            conn.commit()
            return int(
                conn.execute(
                    text(
                        "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c "
                        "JOIN pg_namespace n ON n.oid = c.relnamespace "
                        "WHERE c.relkind = 'r' AND n.nspname = 'public' AND c.relname LIKE 'audit%'"
                    )
                ).scalar_one()
            )
    path = url.removeprefix("sqlite:///")
    store.engine.dispose()
    with closing(sqlite3.connect(path)) as db:  # SQLAlchemy's connections begin a transaction; VACUUM can't
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        db.execute("VACUUM")
    return Path(path).stat().st_size


def _histories(url: str, names: dict[str, list[str]], samples: int) -> dict[str, Any]:
    store = SqlCheckpointStore(url)
    index = AuditIndex(store.engine)
    rng = random.Random(1)
    out = {}
    for kind in ("pod", "job", "node"):
        picks = rng.sample(names[kind], min(samples, len(names[kind])))
        query_ms, sizes = [], []
        for name in picks:
            started = time.perf_counter()
            sizes.append(len(history(index, LOG, kind, name, None, None)))
            query_ms.append((time.perf_counter() - started) * 1000)
        out[kind] = {
            "subjects": len(picks),
            "entries_median": statistics.median(sizes),
            "entries_max": max(sizes),
            "ms_p50": round(statistics.median(query_ms), 1),
            "ms_max": round(max(query_ms), 1),
        }
    store.close()
    return out


def _project(trace: Path, tmp: str, out: dict[str, Any]) -> None:
    """`strata project --stop-at-end` through the local Kafka, without and with the audit."""
    from strata.ingest.from_trace import publish_trace
    from strata.log.config import settings_from
    from strata.log.topics import drop_topics, ensure_topics

    settings = settings_from().with_(topic_prefix=f"bench-audit-{uuid.uuid4().hex[:8]}.")
    ensure_topics(settings)
    try:
        report = publish_trace(settings, trace)
        for flag, db in (("--no-audit", "plain"), ("--audit", "audited")):
            env = env_for(settings, STRATA_DB_URL=f"sqlite:///{tmp}/project-{db}.db")
            started = time.monotonic()
            command = [STRATA, "project", "--stop-at-end", "--checkpoint-every", "500000", flag]
            subprocess.run(command, env=env, check=True, stderr=subprocess.DEVNULL)
            out[f"project_{db}_records_per_s"] = round(report.records / (time.monotonic() - started))
            _progress(out)
    finally:
        drop_topics(settings)


def _subjects(trace: Path) -> dict[str, list[str]]:
    pods, jobs, nodes = set(), set(), set()
    with trace.open("rb") as f:
        for line in f:
            if b'"kind":"Pod"' not in line and b'"kind":"Node"' not in line:
                continue
            try:
                obj = json.loads(line).get("object") or {}
                meta = obj.get("metadata") or {}
            except (ValueError, AttributeError):
                continue  # the generator writes some bad records on purpose
            if not isinstance(meta.get("name"), str):
                continue
            if obj.get("kind") == "Node":
                nodes.add(meta["name"])
            elif isinstance(meta.get("namespace"), str):
                pods.add(f"{meta['namespace']}/{meta['name']}")
                group = (meta.get("annotations") or {}).get(GROUP_NAME)
                if group:
                    jobs.add(f"{meta['namespace']}/{group}")
    return {"pod": sorted(pods), "job": sorted(jobs), "node": sorted(nodes)}


if __name__ == "__main__":
    main()
