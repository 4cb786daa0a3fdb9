"""Projector crash: SIGKILL `strata project` at random points of a long history, restart it each time.

Each run is killed either as it starts restoring its checkpoint or at a random point up to 1.5 s
after its first checkpoint (checkpoints every 2,000 records, so some kills land in checkpoint
writes); where the
kill landed is read from the projector's own log (``STRATA_LOG_LEVEL=INFO``: restoring, restored,
writing a checkpoint, written, idle). What must hold:

* every checkpoint ever written, and the final state, have the digest of an uninterrupted fold at
  the same version, and the final version is the log's end (nothing lost, nothing applied twice);
* a run restores the newest checkpoint in the store; every checkpoint a run logged as written is
  in the store after the kill; a run killed while folding made progress (its newest checkpoint is
  newer than the one before it); no kill found the projector finished (the history is sized so).

Negative controls: the same check on a checkpoint with a wrong digest, with the final checkpoint
lost, with a checkpoint logged as written but missing, with a kill that made no progress, and with
a kill after the end must report each. The kill points come from a seeded generator.
"""

from __future__ import annotations

import random
import re
from collections import Counter
from dataclasses import dataclass, replace

from strata.dev.faults import FaultContext, FaultResult, Verdict
from strata.dev.faults.common import STRATA, env_for, fold_digests, fresh_log, kill_after, strata
from strata.dev.gen import generate
from strata.ingest.from_trace import publish_trace
from strata.projector.checkpoints.sql import SqlCheckpointStore
from strata.projector.fold.kinds import FoldConfig
from strata.projector.runner import LogRunner

CHECKPOINT_EVERY = 2000  # records: checkpoints come every ~0.2 s, so kills land in writes too
_RESTORED = re.compile(r"restored version (\d+)")
_WRITING = re.compile(r"writing a checkpoint at version (\d+)")
_WRITTEN = re.compile(r"checkpoint at version (\d+) written")
_IDLE = re.compile(r"idle at version (\d+)")


@dataclass(frozen=True)
class Kill:
    run: int
    phase: str  # where it landed: starting | restoring | folding | checkpointing | finished
    restored: int | None  # the version it restored, once it said so
    written: tuple[int, ...]  # checkpoints it logged as written
    before: int  # the newest checkpoint in the store before the run
    after: int  # ... and after the kill
    after_checkpoint: bool = True  # planned after its first checkpoint (else as it starts to restore)


def phase_of(lines: list[str], end: int) -> str:
    """Where a run was when it was killed, from its log lines."""
    phase = "starting"
    for line in lines:
        if "restoring the newest checkpoint" in line:
            phase = "restoring"
        elif _RESTORED.search(line) or _WRITTEN.search(line):
            phase = "folding"
        elif _WRITING.search(line):
            phase = "checkpointing"
        elif m := _IDLE.search(line):
            phase = "finished" if int(m.group(1)) >= end else "folding"
    return phase


def check(kills: list[Kill], checkpoints: dict[int, str], reference: dict[int, str], end: int) -> Verdict:
    """``checkpoints``: version -> digest of every checkpoint in the store at the end."""
    verdict = check_final(checkpoints, reference, end)
    for k in kills:
        found = check_kill(k, checkpoints)
        verdict.lost += found.lost
        verdict.problems += found.problems
    return verdict


def check_final(checkpoints: dict[int, str], reference: dict[int, str], end: int) -> Verdict:
    """Every checkpoint is the uninterrupted fold's at its version, and the newest is the end."""
    verdict = Verdict(mismatches=sum(1 for v, d in checkpoints.items() if reference.get(v) != d))
    if verdict.mismatches:
        verdict.problem(f"{verdict.mismatches} checkpoint(s) differ from an uninterrupted fold")
    newest = max(checkpoints, default=0)
    if newest != end:
        verdict.lost += end - newest
        verdict.problem(f"the final state is at version {newest}, the log ends at {end}")
    return verdict


def check_kill(k: Kill, checkpoints: dict[int, str]) -> Verdict:
    """One run: it restored the newest checkpoint, kept every checkpoint it wrote, made progress
    when killed after its first checkpoint, and had not reached the end."""
    verdict = Verdict()
    if k.restored is not None and k.restored != k.before:
        # a checkpoint is stored only once the audit index holds its records: the newest is always usable
        verdict.problem(f"run {k.run}: restored version {k.restored}, not the newest checkpoint {k.before}")
    missing = [v for v in k.written if v not in checkpoints]
    if missing:
        verdict.lost += len(missing)
        verdict.problem(f"run {k.run}: checkpoints logged as written are missing: {missing}")
    if k.phase == "finished":
        verdict.problem(f"run {k.run}: the projector had reached the end before the kill")
    elif k.after_checkpoint and max(k.written, default=-1) <= (k.restored or 0):
        verdict.problem(f"run {k.run}: killed while {k.phase}, no checkpoint past version {k.restored or 0}")
    elif k.written and k.after < max(k.written):
        verdict.problem(f"run {k.run}: the store's newest checkpoint {k.after} is older than one it wrote")
    return verdict


def run(ctx: FaultContext) -> FaultResult:
    result = FaultResult("projector-crash")
    runs = 3 if ctx.quick else 20
    trace = ctx.workdir / "history.jsonl"
    with trace.open("wb") as out:  # long enough that no run reaches the end (~11.5 records a pod)
        generate(out, nodes=100 if ctx.quick else 800, pods=7000 if ctx.quick else 20000, seed=7)
    rng = random.Random(20261129)
    with fresh_log(ctx.settings, "projector") as settings:
        end = publish_trace(settings, trace).records
        db = ctx.workdir / "checkpoints.db"
        env = env_for(settings, STRATA_DB_URL=f"sqlite:///{db}", STRATA_LOG_LEVEL="INFO")
        store = SqlCheckpointStore(f"sqlite:///{db}")
        identity = LogRunner(settings, store, FoldConfig()).identity

        def newest() -> int:
            return max((c.version for c in store.list(identity)), default=0)

        ctx.log(f"  {end} records; {runs} kills")
        kills = []
        for i in range(runs):
            before = newest()
            # every fourth run as it starts to restore; the others up to 1.5 s after their first
            # checkpoint (so each has made progress, which the check requires, before it dies)
            when = "restoring the newest checkpoint" if i % 4 == 1 else " written"
            delay = rng.uniform(0.0, 0.05) if i % 4 == 1 else rng.uniform(0.0, 1.5)
            _, lines = kill_after([STRATA, "project", "--checkpoint-every", str(CHECKPOINT_EVERY)], env, delay, when)
            restored = next((int(m.group(1)) for line in lines if (m := _RESTORED.search(line))), None)
            written = tuple(int(m.group(1)) for line in lines if (m := _WRITTEN.search(line)))
            kills.append(Kill(i, phase_of(lines, end), restored, written, before, newest(), i % 4 != 1))
            ctx.log(f"  kill {i + 1} while {kills[-1].phase}: newest checkpoint {before} -> {kills[-1].after}")
        final = strata("project", "--stop-at-end", "--checkpoint-every", str(CHECKPOINT_EVERY), env=env, timeout=900)
        if final.returncode != 0:
            result.notes.append(f"final run failed: {final.stderr.strip()[-200:]}")
        checkpoints = {c.version: c.digest for c in store.list(identity)}
        reference = fold_digests(trace, set(checkpoints) | {end})
        for kill in kills:
            result.count(check_kill(kill, checkpoints))
        result.count(check_final(checkpoints, reference, end))
        _controls(result, kills, checkpoints, reference, end)
        phases = Counter(k.phase for k in kills)
        result.notes.append(
            f"{len(checkpoints)} checkpoints checked, {end} records; kills while "
            + ", ".join(f"{p} {n}" for p, n in sorted(phases.items()))
        )
        store.close()
    return result


def _controls(
    result: FaultResult, kills: list[Kill], checkpoints: dict[int, str], reference: dict[int, str], end: int
) -> None:
    first = min(checkpoints)
    wrong = {**checkpoints, first: "0" * 64}
    without_final = {v: d for v, d in checkpoints.items() if v != end}
    lost_written = [*kills, Kill(len(kills), "folding", 0, (end + 1,), 0, 1)]
    stuck = [replace(kills[-1], phase="folding", written=(), after_checkpoint=True)]
    finished = [replace(kills[-1], phase="finished")]
    ignored = [replace(kills[-1], restored=0, before=max(1, kills[-1].before))]
    for name, args in (
        ("a checkpoint with a wrong digest", (kills, wrong, reference, end)),
        ("the final checkpoint lost", (kills, without_final, reference, end)),
        ("a checkpoint logged as written, missing", (lost_written, checkpoints, reference, end)),
        ("a kill while folding without progress", (stuck, checkpoints, reference, end)),
        ("a kill after the projector finished", (finished, checkpoints, reference, end)),
        ("a run that restored an older checkpoint than the newest", (ignored, checkpoints, reference, end)),
    ):
        result.control(name, check(*args))
