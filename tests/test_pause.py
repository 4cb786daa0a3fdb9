"""A pause of the fold, step by step: what a long one is logged with."""

from __future__ import annotations

import time
from pathlib import Path

from strata.log.config import settings_from
from strata.projector.release import Release
from strata.projector.replay import replay_file
from strata.projector.runner import LogRunner, Progress, _Following, _Pause
from strata.projector.sqlstore import SqlCheckpointStore
from strata.projector.state import FoldConfig
from tests.contracts import LOG
from tests.test_writer import TRACE


def test_a_pause_counts_its_steps_less_what_it_waited_for_the_audit_writer() -> None:
    pause = _Pause()
    time.sleep(0.02)
    pause.step("collect")
    waiting = time.perf_counter()
    time.sleep(0.03)
    pause.waited = time.perf_counter() - waiting  # the fold waited for the writer: counted apart, not as a pause
    pause.step("audit")
    names = [name for name, _ in pause.steps]
    assert names == ["collect", "audit"]
    assert 0.015 < pause.steps[0][1] < 0.2 and abs(pause.steps[1][1]) < 0.01
    assert abs(pause.seconds - sum(s for _, s in pause.steps)) < 1e-9
    assert str(pause).startswith("collect ") and ", audit " in str(pause)


def test_a_pause_that_forks_a_checkpoint_leaves_the_freeing_to_the_next(tmp_path: Path) -> None:
    """A fork is its pause's long step: freeing parts then would copy every page it touches (the
    child shares them), so the parts wait for the next pause."""
    state, _ = replay_file(TRACE)
    runner = LogRunner(settings_from(), SqlCheckpointStore(f"sqlite:///{tmp_path / 'cp.db'}"), FoldConfig())
    runner._identity = LOG  # no broker: the log's identity is what its cluster id would give
    release = Release()
    run = _Following(runner, state, None, None, None, Progress(state.version, state.version), 1, 3600.0, release)
    run.requested = -1  # a checkpoint is due now
    release.keep(object())
    run.tend(time.monotonic(), idle=True)
    assert run.writer.busy, "the pause forked a checkpoint's child"
    assert len(release) == 1
    run.writer.wait()
    run.requested = state.version  # nothing due: an ordinary pause frees its parts
    run.tend(time.monotonic(), idle=True)
    assert not run.writer.busy and len(release) == 0
