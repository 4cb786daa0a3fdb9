"""Issue 15's budget in the test command: `strata ui` answers every page within 300 ms of server
time at 5,000 nodes and 150,000 pods, live and near a version asked for, at the speed of the
runs where that line was set: the budget grows with the survey's time in the same run (the same
fold of the same history; see ``bench/ui_bench.py``), since this machine runs the whole workload
two to three times slower on some days. The bench prints the 300 ms line as it is, too.

The whole of ``bench/ui_bench.py`` at its default size (a history from `strata gen`, published to
the real broker, projected, then served by `strata ui` and asked over HTTP): its pass line, and
its control (the same requests to a UI that keeps no cache must miss the line). 3-6 minutes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from strata.log.config import Settings
from tests.paths import REPO

pytestmark = pytest.mark.kafka
BENCH = REPO / "bench" / "ui_bench.py"


def test_every_page_answers_within_300_ms_at_5000_nodes_and_150000_pods_at_reference_speed(
    kafka: Settings, tmp_path: Path
) -> None:
    figures = tmp_path / "ui.json"
    env = {**os.environ, "STRATA_KAFKA_BOOTSTRAP": kafka.bootstrap}
    command = [sys.executable, str(BENCH), "--requests", "10", "--topic-prefix", kafka.topic_prefix]
    command += ["--json", str(figures)]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=1800)
    out = done.stdout
    # the live and near tables (the pass line's) come first, the control's last
    shown = out if len(out) <= 10000 else f"{out[:6000]}\n[...]\n{out[-4000:]}"
    shown += f"\n{done.stderr[-3000:]}"
    print(shown)  # the bench's table, in the test's report
    found = json.loads(figures.read_text())
    assert found["control_failed"], shown  # the line can tell a cache from none
    assert found["passed_at_speed"], shown
    assert done.returncode == 0, shown
