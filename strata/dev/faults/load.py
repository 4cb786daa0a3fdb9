"""Load: a sustained stream into the cache log with three projectors following it.

A publisher appends records at a fixed rate (a synthetic history, replayed round and round so the
state stays bounded) while three `strata project` processes follow. Reported: their lag (records
behind the log's end, from their own reports) as percentiles, and their RSS early and at the end:
memory must not grow beyond the state itself. Full run: 5,000 records/s for 10 minutes.

What must hold: the log's end equals the records published (fewer: lost; more: duplicates), each
follower stops cleanly at exactly the log's end (short of it: records lost; past it: an over-count,
which is a duplicate applied), and no follower's RSS grows past the bound. Negative controls: the
same check with a follower one short, one past the end, the log one record longer than what was
published, and a grown RSS must report each.
"""

from __future__ import annotations

import re
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, replace

from strata.dev.faults import FaultContext, FaultResult, Verdict
from strata.dev.faults.common import STRATA, env_for, fresh_log, percentile, rss_mb, until
from strata.dev.gen import generate
from strata.log.cachelog import CacheLogReader, CacheLogWriter
from strata.schemas.trace import read_trace

_REPORT = re.compile(r"^version (\d+) lag (\d+)")
_STOPPED = re.compile(r"^stopped at version (\d+)")
GROWTH_LIMIT = 1.25  # end RSS over early RSS, once the state has reached its size


def run(ctx: FaultContext) -> FaultResult:
    rate, seconds = (2000, 20) if ctx.quick else (5000, 600)
    result = FaultResult("load")
    trace = ctx.workdir / "history.jsonl"
    with trace.open("wb") as out:
        generate(out, nodes=200, pods=4000, churn=2.0, seed=11)
    records = [line.record for line in read_trace(trace)]
    with fresh_log(ctx.settings, "load") as settings:
        stop = threading.Event()
        published = [0]
        writer = CacheLogWriter(settings)
        publisher = threading.Thread(target=_publish, args=(writer, records, rate, stop, published), daemon=True)
        followers = []
        for i in range(3):
            env = env_for(settings, STRATA_DB_URL=f"sqlite:///{ctx.workdir / f'f{i}.db'}")
            argv = [STRATA, "project", "--no-audit", "--checkpoint-every", "1000000", "--replica", f"load-{i}"]
            followers.append(subprocess.Popen(argv, env=env, stderr=subprocess.PIPE, text=True))
        lags: list[list[int]] = [[] for _ in followers]
        versions: list[list[int]] = [[] for _ in followers]
        final: list[list[int]] = [[] for _ in followers]
        readers = [
            threading.Thread(target=_read_reports, args=(p, lags[i], versions[i], final[i]), daemon=True)
            for i, p in enumerate(followers)
        ]
        for t in readers:
            t.start()
        started = time.monotonic()
        publisher.start()
        time.sleep(min(seconds / 5, 60))
        early = [rss_mb(p.pid) for p in followers]
        time.sleep(max(0.0, seconds - (time.monotonic() - started)))
        stop.set()
        publisher.join()
        late = [rss_mb(p.pid) for p in followers]
        log_end = CacheLogReader(settings).end_offset()
        # stop them once each has reported the log's end (a busy machine can leave one behind for a while)
        until(lambda: all(v and v[-1] == log_end for v in versions), 120, every_s=0.5)
        for p in followers:
            p.send_signal(signal.SIGTERM)
        for p in followers:
            p.wait(120)
        for t in readers:
            t.join(10)
        end = published[0]
        took = time.monotonic() - started
        all_lags = sorted(lag for follower in lags for lag in follower)
        seen = Observed(
            published=end,
            log_end=log_end,
            finals=[f[-1] if f else None for f in final],
            returncodes=[p.returncode for p in followers],
            early=early,
            late=late,
        )
        result.count(check(seen), runs=len(followers))
        for name, broken in (
            ("a follower one record short", replace(seen, finals=[seen.log_end - 1, *seen.finals[1:]])),
            ("a follower past the log's end", replace(seen, finals=[seen.log_end + 1, *seen.finals[1:]])),
            ("a record published twice", replace(seen, log_end=seen.published + 1)),
            ("a follower's memory grown", replace(seen, late=[seen.early[0] * 2, *seen.late[1:]])),
        ):
            result.control(name, check(broken))
        p50, p99 = percentile(all_lags, 50), percentile(all_lags, 99)
        result.notes.append(
            f"{end} records at {end / took:,.0f}/s for {took:.0f} s; lag in records (in ms at this rate) "
            f"p50 {p50} ({p50 * 1000 // rate}), p99 {p99} ({p99 * 1000 // rate}), max {max(all_lags, default=0)}; "
            f"RSS MB early {[round(x) for x in early]} end {[round(x) for x in late]}"
        )
    return result


@dataclass(frozen=True)
class Observed:
    published: int  # records handed to the producer (all flushed)
    log_end: int  # the cache log's end offset afterwards
    finals: list[int | None]  # each follower's last "stopped at version N"
    returncodes: list[int | None]
    early: list[float]  # RSS (MB) once the state had its size
    late: list[float]  # RSS (MB) at the end


def check(seen: Observed) -> Verdict:
    verdict = Verdict()
    if seen.log_end != seen.published:
        verdict.lost += max(0, seen.published - seen.log_end)
        verdict.duplicates += max(0, seen.log_end - seen.published)
        verdict.problem(f"{seen.published} records published, the log ends at {seen.log_end}")
    for i, (final, code) in enumerate(zip(seen.finals, seen.returncodes, strict=True)):
        if code != 0 or final is None:
            verdict.problem(f"follower {i} ended with {code}, stopped at {final}")
        elif final < seen.log_end:
            verdict.lost += seen.log_end - final
            verdict.problem(f"follower {i} stopped at {final}, the log ends at {seen.log_end}")
        elif final > seen.log_end:
            verdict.duplicates += final - seen.log_end
            verdict.problem(f"follower {i} counted {final} records, the log has {seen.log_end}")
        if seen.late[i] > seen.early[i] * GROWTH_LIMIT:
            verdict.problem(f"follower {i}: RSS {seen.early[i]:.0f} MB -> {seen.late[i]:.0f} MB")
    return verdict


def _publish(writer: CacheLogWriter, records: list, rate: int, stop: threading.Event, published: list[int]) -> None:
    tick = 0.05
    per_tick = max(1, int(rate * tick))
    next_at = time.monotonic()
    i = 0
    while not stop.is_set():
        for _ in range(per_tick):
            writer.append(records[i % len(records)])
            i += 1
        published[0] = i
        next_at += tick
        time.sleep(max(0.0, next_at - time.monotonic()))
    writer.flush()


def _read_reports(proc: subprocess.Popen[str], lags: list[int], versions: list[int], final: list[int]) -> None:
    assert proc.stderr is not None
    for line in proc.stderr:
        if m := _REPORT.match(line):
            versions.append(int(m.group(1)))
            lags.append(int(m.group(2)))
        elif m := _STOPPED.match(line):
            final.append(int(m.group(1)))
