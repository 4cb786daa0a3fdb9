"""A pause of the fold, step by step: what a long one is logged with."""

from __future__ import annotations

import time

from strata.projector.runner import _Pause


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
