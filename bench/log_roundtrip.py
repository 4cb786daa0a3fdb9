"""Benchmark: the local broker's start time and the cache log's produce/consume rates.

    .venv/bin/python bench/log_roundtrip.py [--records 50000] [--size 1024]

Starts a second, throw-away broker (its own data directory and port) to time a cold start
(storage format included) and a warm restart, then publishes ``--records`` WatchEvents of about
``--size`` bytes each through the codec into a fresh cache log on that broker and reads them back.
Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import resource
import tempfile
import time
from pathlib import Path

from strata.dev.stack.kafka import KafkaBroker
from strata.log.cachelog import CacheLogReader, CacheLogWriter
from strata.log.config import settings_from
from strata.log.topics import ensure_topics
from strata.schemas import WatchEvent, encode, objectjson


def pod_event(i: int, size: int) -> WatchEvent:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"job-{i // 8}-task-{i % 8}",
            "namespace": "bench",
            "uid": f"uid-{i:012d}",
            "resourceVersion": str(1000 + i),
            "annotations": {"scheduling.k8s.io/group-name": f"job-{i // 8}"},
        },
        "spec": {
            "schedulerName": "volcano",
            "containers": [
                {
                    "name": "main",
                    "image": "registry/bench:1",
                    "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}},
                }
            ],
        },
        "status": {"phase": "Pending"},
    }
    pad = size - len(objectjson.dumps(pod)) - 90  # the envelope's own fields
    pod["metadata"]["labels"] = {"padding": "x" * max(0, pad)}
    return WatchEvent(
        op="ADDED",
        api_version="v1",
        kind="Pod",
        name=pod["metadata"]["name"],
        namespace="bench",
        uid=pod["metadata"]["uid"],
        resource_version=pod["metadata"]["resourceVersion"],
        source="bench",
        object=objectjson.dumps(pod),
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=50_000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--port", type=int, default=29192)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="strata-bench-") as tmp:
        broker = KafkaBroker(Path(tmp), args.port)
        quiet = lambda msg: None  # noqa: E731
        t0 = time.monotonic()
        broker.up(log=quiet)
        cold = time.monotonic() - t0
        broker.down()
        t0 = time.monotonic()
        broker.up(log=quiet)
        warm = time.monotonic() - t0
        try:
            settings = settings_from(bootstrap=broker.bootstrap, topic_prefix="bench.", data_dir=tmp, environ={})
            ensure_topics(settings)
            records = [pod_event(i, args.size) for i in range(args.records)]
            message_bytes = sum(len(encode(r)) for r in records) / len(records)

            writer = CacheLogWriter(settings)
            t0 = time.monotonic()
            for record in records:
                writer.append(record)
            writer.flush()
            produce_s = time.monotonic() - t0

            t0 = time.monotonic()
            count = sum(1 for _ in CacheLogReader(settings).read())
            consume_s = time.monotonic() - t0
            assert count == args.records, count
        finally:
            broker.down()

    print(
        json.dumps(
            {
                "broker_cold_start_s": round(cold, 2),
                "broker_warm_restart_s": round(warm, 2),
                "records": args.records,
                "avg_message_bytes": round(message_bytes),
                "produce_records_per_s": round(args.records / produce_s),
                "consume_records_per_s": round(args.records / consume_s),
                "round_trip_records_per_s": round(args.records / (produce_s + consume_s)),
                "client_peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
