"""Benchmark: replay throughput (file and broker), snapshot() cost, peak RSS of the projector.

    .venv/bin/python bench/projector_bench.py [--trace PATH] [--nodes 5000] [--pods 150000] [--no-broker]

Without --trace it generates a synthetic history with `strata gen`'s generator first. Replay from
a file runs in a child process so that its peak RSS is its own. The broker part publishes the
trace into a fresh cache log of the running local broker (`strata dev up`) and folds it back
from offset 0. Prints one JSON object.
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
from pathlib import Path

CHILD = r"""
import json, resource, sys, time
from pathlib import Path
from projector.replay import replay_file

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


def _snapshot_cost(trace: Path) -> dict[str, float]:
    from projector.replay import replay_file

    state, _ = replay_file(trace)
    costs = []
    touched = list(state.tasks.keys())[:1000]
    for i in range(200):
        t0 = time.perf_counter()
        state.snapshot()
        costs.append(time.perf_counter() - t0)
        # dirty a few shards between snapshots, as a running projector would
        uid = touched[i % len(touched)]
        state.tasks[uid] = state.tasks[uid]
    t0 = time.perf_counter()
    copy.deepcopy(state)
    deep = time.perf_counter() - t0
    return {
        "snapshot_median_ms": round(statistics.median(costs) * 1000, 4),
        "snapshot_max_ms": round(max(costs) * 1000, 4),
        "deepcopy_ms": round(deep * 1000, 1),
    }


def _broker(trace: Path) -> dict[str, float]:
    from ingest.from_trace import publish_trace
    from projector.runner import LogRunner
    from projector.sqlstore import SqlCheckpointStore
    from projector.state import FoldConfig
    from strata.config import settings_from
    from strata.topics import ensure_topics

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
        from strata.gen import generate

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
    finally:
        if generated is not None:
            os.unlink(generated)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
