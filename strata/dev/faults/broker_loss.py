"""Broker loss: a three-broker cluster (replication 3, min.insync.replicas 2) loses one broker under
load and gets it back; then the whole cluster restarts.

What must hold: the producer thread ends without an error, having handed over every record; the
idempotent acks=all producer loses nothing and duplicates nothing (the log holds exactly the
records it was given, in order: counted as multisets and compared one by one); and a
`strata project` that follows throughout ends with the digest of an uninterrupted fold.
Negative controls: the same check on the log with a record dropped, with a record duplicated,
with the producer's error, and with a wrong follower digest must report each.
"""

from __future__ import annotations

import subprocess
import threading
import time
from collections import Counter
from dataclasses import dataclass, replace

from strata.dev.faults import FaultContext, FaultResult, Verdict
from strata.dev.faults.cluster import ThreeBrokers
from strata.dev.faults.common import STRATA, env_for, fresh_log, terminate, until
from strata.dev.gen import generate
from strata.log.cachelog import CacheLogReader, CacheLogWriter
from strata.log.config import Settings
from strata.projector.checkpoints.sql import SqlCheckpointStore
from strata.projector.fold.kinds import FoldConfig
from strata.projector.fold.state import CacheState
from strata.projector.runner import LogRunner
from strata.schemas import encode
from strata.schemas.trace import read_trace


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


@dataclass(frozen=True)
class Observed:
    given: list[bytes]  # the records the producer was to send, encoded
    sent: int  # how many it handed over before it ended
    error: str | None  # what ended the producer thread, if it was an exception
    got: list[bytes]  # the log's records, encoded, in offset order
    follower: str | None  # the follower's final digest
    reference: str  # an uninterrupted fold's digest of ``given``


def check(seen: Observed) -> Verdict:
    verdict = Verdict()
    if seen.error is not None:
        verdict.problem(f"the producer thread died: {seen.error}"[:300])
    if seen.sent != len(seen.given):
        verdict.lost += len(seen.given) - seen.sent
        verdict.problem(f"the producer handed over {seen.sent} of {len(seen.given)} records")
    want, have = Counter(seen.given), Counter(seen.got)
    verdict.lost += sum((want - have).values())
    verdict.duplicates += sum((have - want).values())
    if not verdict.lost and not verdict.duplicates and seen.got != seen.given:
        verdict.mismatches += 1
        verdict.problem("the log holds the records in another order")
    if seen.follower != seen.reference:
        verdict.mismatches += 1
        verdict.problem(f"the follower ended at digest {seen.follower}, the fold's is {seen.reference}")
    return verdict


def _run(ctx: FaultContext, result: FaultResult, cluster: ThreeBrokers, settings: Settings, records: list) -> None:
    db = ctx.workdir / "c.db"
    env = env_for(settings, STRATA_DB_URL=f"sqlite:///{db}")
    follower_log = (ctx.workdir / "follower.log").open("w")
    follower = subprocess.Popen(
        [STRATA, "project", "--no-audit", "--checkpoint-every", "5000", "--checkpoint-seconds", "2"],
        env=env,
        stderr=follower_log,
    )
    writer = CacheLogWriter(settings)
    sent = [0]
    error: list[str] = []

    def produce() -> None:  # ~2,000 records/s, through the faults
        try:
            for record in records:
                writer.append(record)
                sent[0] += 1
                if sent[0] % 100 == 0:
                    time.sleep(0.05)
            writer.flush(timeout_s=300)
        except Exception as exc:  # the check reports it: a dead producer is no pass
            error.append(f"{type(exc).__name__}: {exc}")

    producer = threading.Thread(target=produce, daemon=True)
    producer.start()
    time.sleep(3)
    ctx.log(f"  broker 2 killed after {sent[0]} records")
    cluster.kill(1)
    time.sleep(5)
    ctx.log(f"  broker 2 back after {sent[0]} records")
    cluster.start(1)
    cluster.wait_ready()
    producer.join(600)
    if producer.is_alive():
        error.append("still producing after 600 s")
    ctx.log(f"  {sent[0]} records handed over; the whole cluster restarts")
    cluster.stop_all()
    for i in range(3):
        cluster.start(i)
    cluster.wait_ready()
    got = [encode(entry.record) for entry in CacheLogReader(settings).read(timeout_s=60)]
    # the follower reconnects by itself; once at the end, its final checkpoint is the reference's
    store = SqlCheckpointStore(f"sqlite:///{db}")
    runner = LogRunner(settings, store, FoldConfig())

    def caught_up() -> bool:
        newest = store.latest(runner.identity)
        return newest is not None and newest.info.version >= len(got)

    until(caught_up, 180, every_s=1)
    terminate(follower, 120)
    reference = CacheState()
    for record in records:
        reference.apply(record)
    newest = store.latest(runner.identity)
    store.close()
    seen = Observed(
        given=[encode(r) for r in records],
        sent=sent[0],
        error=error[0] if error else None,
        got=got,
        follower=newest.info.digest if newest else None,
        reference=reference.snapshot().digest(),
    )
    if not result.count(check(seen), runs=2):
        tail = (ctx.workdir / "follower.log").read_text().strip().splitlines()[-3:]
        result.notes.append(f"follower: {' | '.join(tail)}"[:300])
    for name, broken in (
        ("a record dropped", replace(seen, got=seen.got[:100] + seen.got[101:])),
        ("a record duplicated", replace(seen, got=[*seen.got[:100], seen.got[100], *seen.got[100:]])),
        ("the producer thread died", replace(seen, error="KafkaException: _MSG_TIMED_OUT")),
        ("a wrong follower digest", replace(seen, follower="0" * 64)),
    ):
        result.control(name, check(broken))
    result.notes.append(
        f"{len(got)} of {len(records)} records in the log; follower at {newest.info.version if newest else 0}"
    )
