"""Benchmark: replay throughput (file and broker), what a snapshot costs, peak RSS of the projector.

    .venv/bin/python bench/projector_bench.py [--trace PATH] [--nodes 5000] [--pods 150000] [--no-broker]

Without --trace it generates a synthetic history with `strata gen`'s generator first. Replay from
a file runs in a child process so that its peak RSS is its own. The broker part publishes the
trace into a fresh cache log of the running local broker (`strata dev up`) and folds it back
from offset 0. Both folds run with the collector set up for folding (``gctune``). Prints one JSON
object.

The snapshot cost: ``state.snapshot()`` itself only freezes 64-shard copy-on-write maps
(``snapshot_freeze_*``, O(1)); the fold pays later, when its next write to each shared shard
copies that shard. So on the state folded from the whole trace, the benchmark times a snapshot
plus the next 1,000 records (the snapshot released at the end, as a projector releases the
previous one) against the same 1,000 records without a snapshot, 50 times each, interleaved
so that machine noise hits both: ``snapshot_plus_1000_*`` and ``plain_1000_*`` (median, max),
and ``snapshot_overhead_*``, the paired difference: what one snapshot really costs, beside
``deepcopy_ms``, what a full copy of the state would. The 1,000 records are trace lines of the
trace's own kind of traffic, folded with ``fold_line``: the lifecycle of 200 Running pods spread
over the state (DELETED, ADDED as Pending, BIND, BIND_SUCCEEDED, MODIFIED as Running), which
leaves each task as it found it, so the same lines apply again on every pass; the benchmark
checks that they all apply, that each pass advances the version by 1,000 and says how many of
the 64 task and node-usage shards a pass copies after a snapshot (``snapshot_*_shards_copied``).
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

from strata.dev.gen import cycle_lines
from strata.projector.fold.state import CacheState
from strata.projector.gctune import tune_for_fold
from strata.projector.replay import fold_line, replay_file

CHILD = r"""
import json, resource, sys, time
from pathlib import Path
from strata.projector.gctune import tune_for_fold
from strata.projector.replay import replay_file

tune_for_fold()  # as `strata replay` sets the collector up for a fold
path = Path(sys.argv[1])
t0 = time.process_time()
with open(path, "rb", buffering=1 << 20) as f:  # stream, as replay does: the file can be larger than memory
    for line in f:
        try:
            json.loads(line)
        except ValueError:
            pass
json_s = time.process_time() - t0
t0 = time.process_time()
state, report = replay_file(path)
replay_s = time.process_time() - t0
snap = state.snapshot()
t0 = time.perf_counter()
render = len(snap.canonical_bytes())
render_s = time.perf_counter() - t0
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # the fold and one rendering of its snapshot
print(json.dumps({"records": report.records, "json_loads_s": json_s, "replay_s": replay_s, "rss": rss,
                  "tasks": len(snap.tasks), "nodes": len(snap.nodes), "bad": len(report.bad),
                  "rejected": len(report.rejected), "canonical_bytes": render, "render_s": render_s,
                  "digest": snap.digest()}))
"""


SNAPSHOT_REPEATS = 50  # measurements of each kind, interleaved
CYCLE_PODS = 200  # five records each: 1,000 records per measurement


def _cycle_lines(trace: Path, state: CacheState) -> list[bytes]:
    """1,000 trace lines of the trace's own kind of traffic that the full-size state applies, and
    applies again and again: for 200 Running tasks spread over the state, each pod's lifecycle
    as the trace writes it (DELETED, ADDED as Pending, BIND to its node, BIND_SUCCEEDED,
    MODIFIED as Running there). A pass leaves every task as it found it, and every record but
    BIND_SUCCEEDED writes the task's shard; DELETED and BIND also write the node's usage shard."""
    try:
        return cycle_lines(trace, state.tasks, CYCLE_PODS)
    except ValueError as exc:
        raise SystemExit(f"the snapshot cost needs {CYCLE_PODS} cycling pods: {exc}") from exc


def _apply(state: CacheState, lines: list[bytes]) -> None:
    for line in lines:
        fold_line(state, line)


def _snapshot_cost(trace: Path) -> dict[str, Any]:
    """What a snapshot costs the fold: the freeze is O(1), but the next write to each shard copies
    it. So time "snapshot, then the next 1,000 records, then release the snapshot" against the
    same 1,000 records without a snapshot, on the full-size state, interleaved."""
    state, _ = replay_file(trace)
    lines = _cycle_lines(trace, state)
    cycled = {json.loads(line)["pod"] for line in lines if line.startswith(b'{"type":"BIND",')}
    before = {uid: state.tasks[uid] for uid in cycled}
    used_before = {t.node: state.node_used.get(t.node) for t in before.values()}

    # one checked pass first (also the warm-up): every record applies and the pass changes nothing
    version = state.version
    outcomes = Counter(fold_line(state, line).result for line in lines)
    expected = {"applied": 4 * CYCLE_PODS, "ignored": CYCLE_PODS}  # BIND_SUCCEEDED is informational
    if dict(outcomes) != expected or state.version != version + len(lines):
        raise SystemExit(f"the cycle of records does not apply cleanly: {dict(outcomes)}")
    if any(state.tasks[uid] != task for uid, task in before.items()) or any(
        state.node_used.get(node) != used for node, used in used_before.items()
    ):
        raise SystemExit("a pass of the cycle does not leave the state as it found it")
    snap = state.snapshot()
    _apply(state, lines)
    dirtied = {
        "snapshot_task_shards_copied": sum(state.tasks._owned),
        "snapshot_node_used_shards_copied": sum(state.node_used._owned),
    }
    if not all(dirtied.values()):
        raise SystemExit(f"the cycle of records writes no shard: {dirtied}")
    del snap
    _apply(state, lines)  # and one plain pass, so that both kinds start warm

    with_snapshot, plain, freeze, overhead = [], [], [], []
    for i in range(SNAPSHOT_REPEATS):
        pair = {}
        for kind in ("snapshot", "plain") if i % 2 == 0 else ("plain", "snapshot"):
            version = state.version
            if kind == "snapshot":
                t0 = time.perf_counter()
                snap = state.snapshot()
                t1 = time.perf_counter()
                _apply(state, lines)
                del snap  # released, as a projector releases the previous one: the shards it alone held are freed
                t2 = time.perf_counter()
                freeze.append(t1 - t0)
            else:
                t0 = time.perf_counter()
                _apply(state, lines)
                t2 = time.perf_counter()
            if state.version != version + len(lines):
                raise SystemExit(f"a pass advanced the version by {state.version - version}, not {len(lines)}")
            pair[kind] = t2 - t0
        with_snapshot.append(pair["snapshot"])
        plain.append(pair["plain"])
        overhead.append(pair["snapshot"] - pair["plain"])

    t0 = time.perf_counter()
    copy.deepcopy(state)
    deep = time.perf_counter() - t0

    def ms(value: float, digits: int = 2) -> float:
        return round(value * 1000, digits)

    return {
        "snapshot_repetitions": SNAPSHOT_REPEATS,
        "snapshot_plus_1000_median_ms": ms(statistics.median(with_snapshot)),
        "snapshot_plus_1000_max_ms": ms(max(with_snapshot)),
        "plain_1000_median_ms": ms(statistics.median(plain)),
        "plain_1000_max_ms": ms(max(plain)),
        "snapshot_overhead_median_ms": ms(statistics.median(overhead)),
        "snapshot_overhead_max_ms": ms(max(overhead)),
        "snapshot_freeze_median_ms": ms(statistics.median(freeze), 4),
        "snapshot_freeze_max_ms": ms(max(freeze), 4),
        **dirtied,
        "deepcopy_ms": ms(deep, 1),
    }


def _broker(trace: Path) -> dict[str, float]:
    from strata.ingest.from_trace import publish_trace
    from strata.log.config import settings_from
    from strata.log.topics import ensure_topics
    from strata.projector.checkpoints.sql import SqlCheckpointStore
    from strata.projector.fold.state import FoldConfig
    from strata.projector.runner import LogRunner

    tune_for_fold()  # as the projector does
    settings = settings_from(topic_prefix=f"bench-{uuid.uuid4().hex[:8]}.")
    ensure_topics(settings)
    t0 = time.perf_counter()
    report = publish_trace(settings, trace)
    publish_s = time.perf_counter() - t0
    with tempfile.TemporaryDirectory() as tmp:
        runner = LogRunner(settings, SqlCheckpointStore(f"sqlite:///{tmp}/bench.db"), FoldConfig())
        end = runner.reader.end_offset()
        t0 = time.perf_counter()
        state = runner.state_at(end)
        fold_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        info = runner.checkpoint(state)
        checkpoint_s = time.perf_counter() - t0
    return {
        "broker_publish_records_per_s": round(report.records / publish_s),
        "broker_replay_records_per_s": round(end / fold_s),
        "checkpoint_write_s": round(checkpoint_s, 2),
        "checkpoint_bytes": info.size,
        "broker_digest": info.digest,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--trace", type=Path)
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--pods", type=int, default=150_000)
    parser.add_argument("--no-broker", action="store_true")
    args = parser.parse_args()

    trace = args.trace
    generated = None
    if trace is None:
        from strata.dev.gen import generate

        generated = trace = Path(tempfile.mkstemp(suffix=".jsonl")[1])
        t0 = time.perf_counter()
        with open(trace, "wb") as out:
            generate(out, nodes=args.nodes, pods=args.pods)
        gen_s = time.perf_counter() - t0
    try:
        child = subprocess.run([sys.executable, "-c", CHILD, str(trace)], capture_output=True, text=True, check=True)
        file_run = json.loads(child.stdout)
        result = {
            "trace": str(trace) if generated is None else f"generated: {args.nodes} nodes, {args.pods} pods",
            "trace_bytes": trace.stat().st_size,
            "records": file_run["records"],
            "replay_records_per_s": round(file_run["records"] / file_run["replay_s"]),
            "replay_vs_json_loads": round(file_run["replay_s"] / file_run["json_loads_s"], 2),
            "json_loads_records_per_s": round(file_run["records"] / file_run["json_loads_s"]),
            "peak_rss_mb": round(file_run["rss"] / 2**20),
            "final_tasks": file_run["tasks"],
            "final_nodes": file_run["nodes"],
            "bad_records": file_run["bad"],
            "rejected_records": file_run["rejected"],
            "render_canonical_s": round(file_run["render_s"], 2),
            "digest": file_run["digest"],
        }
        if generated is not None:
            result["generate_s"] = round(gen_s, 1)
        result.update(_snapshot_cost(trace))
        if not args.no_broker:
            result.update(_broker(trace))
            result["broker_digest_matches_file"] = result.pop("broker_digest") == result["digest"]
            # the fold from the broker (wall clock) against the file's (CPU time), same records
            result["broker_fold_vs_replay"] = round(
                result["replay_records_per_s"] / result["broker_replay_records_per_s"], 2
            )
    finally:
        if generated is not None:
            os.unlink(generated)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
