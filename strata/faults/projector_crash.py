"""Projector crash: SIGKILL `strata project` at random points of a long history, restart it each time.

What must hold: every checkpoint it ever wrote, and the final state, have the digest of an
uninterrupted fold at the same version; the final version is the log's end (nothing lost, nothing
applied twice). The kill points come from a seeded generator: a failing run can be repeated.
"""

from __future__ import annotations

import random
import signal
import subprocess
import time

from ingest.from_trace import publish_trace
from projector.runner import LogRunner
from projector.sqlstore import SqlCheckpointStore
from projector.state import FoldConfig
from strata.faults import FaultContext, FaultResult
from strata.faults.common import STRATA, env_for, fold_digests, fresh_log
from strata.gen import generate

CHECKPOINT_EVERY = 2000  # records: checkpoints come every ~0.1 s, so kills land in writes too


def run(ctx: FaultContext) -> FaultResult:
    result = FaultResult("projector-crash")
    runs = 3 if ctx.quick else 20
    trace = ctx.workdir / "history.jsonl"
    with trace.open("wb") as out:  # long enough that every run is killed before the end
        generate(out, nodes=100 if ctx.quick else 800, pods=3000 if ctx.quick else 30000, seed=7)
    rng = random.Random(20261129)
    with fresh_log(ctx.settings, "projector") as settings:
        report = publish_trace(settings, trace)
        end = report.records
        db = ctx.workdir / "checkpoints.db"
        env = env_for(settings, STRATA_DB_URL=f"sqlite:///{db}")
        store = SqlCheckpointStore(f"sqlite:///{db}")
        identity = LogRunner(settings, store, FoldConfig()).identity
        ctx.log(f"  {end} records; {runs} kills")
        for i in range(runs):
            before = max((c.version for c in store.list(identity)), default=0)
            proc = subprocess.Popen(
                [STRATA, "project", "--checkpoint-every", str(CHECKPOINT_EVERY)],
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            time.sleep(rng.uniform(0.8, 2.5))  # start-up takes ~0.7 s; then it folds
            finished = proc.poll() is not None
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            after = max((c.version for c in store.list(identity)), default=0)
            result.runs += 1
            if not finished and after >= before:
                result.passed += 1
            else:
                result.notes.append(f"run {i}: {'finished before the kill' if finished else 'went backwards'}")
            ctx.log(f"  kill {i + 1}: newest checkpoint {before} -> {after}")
        final = subprocess.run(
            [STRATA, "project", "--stop-at-end", "--checkpoint-every", str(CHECKPOINT_EVERY)],
            env=env,
            capture_output=True,
            text=True,
            timeout=900,
        )
        if final.returncode != 0:
            result.notes.append(f"final run failed: {final.stderr.strip()[-200:]}")
        checkpoints = store.list(identity)
        reference = fold_digests(trace, {c.version for c in checkpoints} | {end})
        result.digest_mismatches = sum(1 for c in checkpoints if reference.get(c.version) != c.digest)
        newest = checkpoints[-1] if checkpoints else None
        if newest is None or newest.version != end:
            result.records_lost = end - (newest.version if newest else 0)
        elif newest.digest != reference[end]:
            result.digest_mismatches += 1
        result.notes.append(f"{len(checkpoints)} checkpoints checked, {end} records")
        store.close()
    return result
