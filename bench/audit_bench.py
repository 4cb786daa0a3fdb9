"""Benchmark: the audit on a long log.

    eval "$(.venv/bin/strata dev up --no-kube)"
    .venv/bin/python bench/audit_bench.py [--nodes 3000] [--pods 90000] [--samples 20]

Generates a synthetic history (`strata gen`, about a million records at the defaults), publishes
it into a fresh topic prefix, runs `strata project --stop-at-end` twice (without and with the
audit index) and times them, then times `strata history pod|job|node` on sampled subjects (the
CLI end to end, and the index query alone). Prints one JSON object; deletes its topics.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from strata.faults.common import STRATA, env_for
from strata.history import history
from strata.ingest.from_trace import publish_trace
from strata.log.config import Settings, settings_from
from strata.log.topics import drop_topics, ensure_topics
from strata.projector.auditstore import AuditIndex
from strata.projector.kinds import GROUP_NAME
from strata.projector.runner import LogRunner
from strata.projector.sqlstore import SqlCheckpointStore
from strata.projector.state import FoldConfig


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", type=int, default=3000)
    parser.add_argument("--pods", type=int, default=90000)
    parser.add_argument("--samples", type=int, default=20)
    args = parser.parse_args()
    settings = settings_from().with_(topic_prefix=f"bench-audit-{uuid.uuid4().hex[:8]}.")
    ensure_topics(settings)
    try:
        run(settings, args)
    finally:
        drop_topics(settings)


def run(settings: Settings, args: argparse.Namespace) -> None:
    out: dict[str, object] = {}
    with tempfile.TemporaryDirectory() as tmp:
        trace = Path(tmp) / "gen.jsonl"
        subprocess.run(
            [STRATA, "gen", "--nodes", str(args.nodes), "--pods", str(args.pods), "-o", str(trace)], check=True
        )
        started = time.monotonic()
        report = publish_trace(settings, trace)
        out["records"] = report.records
        out["publish_records_per_s"] = round(report.records / (time.monotonic() - started))
        for audit, db in (("--no-audit", "plain"), ("--audit", "audit")):
            env = env_for(settings, STRATA_DB_URL=f"sqlite:///{tmp}/{db}.db")
            started = time.monotonic()
            subprocess.run(
                [STRATA, "project", "--stop-at-end", "--checkpoint-every", "500000", audit],
                env=env,
                check=True,
                stderr=subprocess.DEVNULL,
            )
            out[f"project_{db}_records_per_s"] = round(report.records / (time.monotonic() - started))
            print(json.dumps(out), file=sys.stderr)
        out["audit_db_mb"] = round(Path(f"{tmp}/audit.db").stat().st_size / 2**20, 1)

        store = SqlCheckpointStore(env["STRATA_DB_URL"])
        runner = LogRunner(settings, store, FoldConfig())
        index = AuditIndex(store.engine)
        names = _subjects(trace)
        rng = random.Random(1)
        for kind in ("pod", "job", "node"):
            picks = rng.sample(names[kind], min(args.samples, len(names[kind])))
            query_ms, entries = [], []
            for name in picks:
                t = time.perf_counter()
                entries.append(len(history(index, runner.identity, kind, name, None, None)))
                query_ms.append((time.perf_counter() - t) * 1000)
            cli_ms = []
            for name in picks[:5]:
                t = time.perf_counter()
                subprocess.run([STRATA, "history", kind, name, "-o", "json"], env=env, check=True, capture_output=True)
                cli_ms.append((time.perf_counter() - t) * 1000)
            out[f"history_{kind}"] = {
                "subjects": len(picks),
                "entries_median": statistics.median(entries),
                "entries_max": max(entries),
                "query_ms_median": round(statistics.median(query_ms), 1),
                "query_ms_max": round(max(query_ms), 1),
                "cli_ms_median": round(statistics.median(cli_ms)),
                "cli_ms_max": round(max(cli_ms)),
            }
        store.close()
    print(json.dumps(out, indent=2))


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
