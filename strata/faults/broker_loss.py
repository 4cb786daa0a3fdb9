"""Broker loss: a three-broker cluster (replication 3, min.insync.replicas 2) loses one broker under
load and gets it back; then the whole cluster restarts.

What must hold: the idempotent acks=all producer loses nothing and duplicates nothing (the log
holds exactly the records it was given, in order: counted and compared one by one), and a
`strata project` that follows throughout ends with the digest of an uninterrupted fold.
"""

from __future__ import annotations

import subprocess
import threading
import time

from ingest.trace import read_trace
from projector.runner import LogRunner
from projector.sqlstore import SqlCheckpointStore
from projector.state import CacheState, FoldConfig
from schemas import encode
from strata.cachelog import CacheLogReader, CacheLogWriter
from strata.config import Settings
from strata.faults import FaultContext, FaultResult
from strata.faults.cluster import ThreeBrokers
from strata.faults.common import STRATA, env_for, fresh_log, terminate, until
from strata.gen import generate


def run(ctx: FaultContext) -> FaultResult:
    result = FaultResult("broker-loss")
    trace = ctx.workdir / "history.jsonl"
    with trace.open("wb") as out:
        generate(out, nodes=100, pods=2000 if ctx.quick else 8000, seed=5)
    records = [line.record for line in read_trace(trace)]
    cluster = ThreeBrokers(ctx.workdir / "cluster")
    ctx.log("  formatting and starting three brokers")
    cluster.format()
    for i in range(3):
        cluster.start(i)
    try:
        cluster.wait_ready()
        base = Settings(
            bootstrap=cluster.bootstrap, data_dir=ctx.settings.data_dir, replication_factor=3, min_insync_replicas=2
        )
        with fresh_log(base, "brokers") as settings:
            _run(ctx, result, cluster, settings, records)
    finally:
        cluster.down()
    return result


def _run(ctx: FaultContext, result: FaultResult, cluster: ThreeBrokers, settings: Settings, records: list) -> None:
    db = ctx.workdir / "c.db"
    env = env_for(settings, STRATA_DB_URL=f"sqlite:///{db}")
    follower_log = (ctx.workdir / "follower.log").open("w")
    follower = subprocess.Popen(
        [STRATA, "project", "--no-audit", "--checkpoint-every", "5000"], env=env, stderr=follower_log
    )
    writer = CacheLogWriter(settings)
    sent = [0]
    done = threading.Event()

    def produce() -> None:  # ~2,000 records/s, through the faults
        for record in records:
            writer.append(record)
            sent[0] += 1
            if sent[0] % 100 == 0:
                time.sleep(0.05)
            if done.is_set():
                break
        writer.flush(timeout_s=300)

    producer = threading.Thread(target=produce, daemon=True)
    producer.start()
    time.sleep(3)
    ctx.log(f"  broker 2 killed after {sent[0]} records")
    cluster.kill(1)
    time.sleep(5)
    ctx.log(f"  broker 2 back after {sent[0]} records")
    cluster.start(1)
    cluster.wait_ready()
    result.runs += 1
    producer.join(600)
    result.passed += 1 if not producer.is_alive() else 0
    ctx.log(f"  all {sent[0]} records delivered; the whole cluster restarts")
    for i in range(3):
        cluster.stop(i)
    for i in range(3):
        cluster.start(i)
    cluster.wait_ready()
    result.runs += 1
    # the log, message by message, against what was sent
    got = [entry.record for entry in CacheLogReader(settings).read(timeout_s=60)]
    expected = records[: sent[0]]
    same = sum(1 for a, b in zip(got, expected, strict=False) if encode(a) == encode(b))
    result.records_lost = max(0, len(expected) - len(got)) + (min(len(got), len(expected)) - same)
    result.duplicates = max(0, len(got) - len(expected))
    # the follower reconnects by itself; once at the end, its final checkpoint is the reference's
    store = SqlCheckpointStore(f"sqlite:///{db}")
    runner = LogRunner(settings, store, FoldConfig())

    def caught_up() -> bool:
        newest = store.latest(runner.identity)
        return newest is not None and newest.info.version >= len(got)

    until(caught_up, 180, every_s=1)
    terminate(follower, 120)
    reference = CacheState()
    for record in expected:
        reference.apply(record)
    newest = store.latest(runner.identity)
    if newest is None or newest.info.digest != reference.snapshot().digest():
        result.digest_mismatches += 1
        tail = (ctx.workdir / "follower.log").read_text().strip().splitlines()[-3:]
        result.notes.append(f"follower: {' | '.join(tail)}"[:300])
    else:
        result.passed += 1
    store.close()
    result.notes.append(
        f"{len(got)} of {len(expected)} records in the log; follower at {newest.info.version if newest else 0}"
    )
