"""Benchmark: export of the cache log into an archive (zstandard and deflate), fold_archive, restore.

    .venv/bin/python bench/archive_bench.py [--nodes 1000] [--pods 30000] [--records-per-file 100000]

Generates a synthetic history with `strata gen`'s generator, publishes it into a fresh cache log
of the running local broker (`strata dev up`), exports it twice (once per codec), folds the
archive offline, restores it into another fresh cache log and checks that every digest agrees.
Deletes its topics afterwards. Prints the figures as one JSON object.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--pods", type=int, default=30000)
    parser.add_argument("--records-per-file", type=int, default=100_000)
    args = parser.parse_args()

    from strata.dev.gen import generate
    from strata.ingest.from_trace import publish_trace
    from strata.log.config import settings_from
    from strata.log.topics import ensure_topics
    from strata.projector.replay import replay_file
    from strata.recovery.archive import export_archive, fold_archive, restore_archive
    from tests.conftest import drop_topics

    broker = settings_from()
    # not "test-": a test session that ends deletes every test- topic, and others may run tests meanwhile
    prefix = f"bench-archive-{uuid.uuid4().hex[:8]}."
    source = broker.with_(topic_prefix=prefix, command_partitions=1)
    target = broker.with_(topic_prefix=f"{prefix}restored.", command_partitions=1)
    figures: dict[str, object] = {}
    with tempfile.TemporaryDirectory() as tmp:
        trace = Path(tmp) / "history.jsonl"
        with open(trace, "wb") as out:
            generate(out, nodes=args.nodes, pods=args.pods, seed=1)
        figures["trace_bytes"] = trace.stat().st_size
        expected = replay_file(trace)[0].snapshot().digest()
        ensure_topics(source)
        try:
            t0 = time.perf_counter()
            published = publish_trace(source, trace)
            figures["records"] = published.records
            figures["publish_records_per_s"] = round(published.records / (time.perf_counter() - t0))
            for codec in ("zstandard", "deflate"):
                directory = Path(tmp) / codec
                report = export_archive(source, directory, codec=codec, records_per_file=args.records_per_file)
                figures[f"export_{codec}"] = {
                    "files": report.files,
                    "bytes": report.bytes,
                    "seconds": round(report.seconds, 2),
                    "records_per_s": round(report.records / report.seconds),
                    "mb_per_s": round(report.bytes / 1e6 / report.seconds, 2),
                    "file_sizes": sorted(p.stat().st_size for p in directory.glob("*.avro")),
                }
            archive = Path(tmp) / "zstandard"
            t0 = time.perf_counter()
            state, folded = fold_archive(archive)
            seconds = time.perf_counter() - t0
            assert state.snapshot().digest() == expected, "fold_archive differs from replay"
            figures["fold_archive"] = {"seconds": round(seconds, 2), "records_per_s": round(folded.records / seconds)}
            restored = restore_archive(target, archive)  # verifies (refolds) the archive first
            figures["restore"] = {
                "seconds": round(restored.seconds, 2),
                "records_per_s": round(restored.records / restored.seconds),
                "note": "includes verify_archive (a full refold) before producing",
            }
            from strata.projector.checkpoints.sql import SqlCheckpointStore
            from strata.projector.fold.state import FoldConfig
            from strata.projector.runner import LogRunner

            runner = LogRunner(target, SqlCheckpointStore(f"sqlite:///{Path(tmp) / 'c.db'}"), FoldConfig())
            assert runner.state_at(runner.reader.end_offset()).snapshot().digest() == expected, "restored log differs"
            figures["digests_agree"] = True
        finally:
            drop_topics(source)  # the restored log's prefix starts with the source's
    print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
