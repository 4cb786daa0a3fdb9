"""The scale bench's CPU attribution (bench/scale_bench.py ``CpuWatch``): a helper process counts
under its own role even when first seen before its exec, still showing its parent's command line."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from types import ModuleType

from tests.paths import REPO

BENCH = REPO / "bench" / "scale_bench.py"
# a parent that starts a "reader" half a second after forking it: the child runs the parent's
# command line meanwhile, then burns CPU under a command line naming the log's reader
PARENT = """
import subprocess, sys, time
burn = "x = 0\\nfor i in range(10**7): x += i"
name = ".".join(("strata", "log", "readahead"))  # not spelt whole in the parent's own command line
subprocess.run([sys.executable, "-c", burn, name], preexec_fn=lambda: time.sleep(0.5))
"""


def _bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("scale_bench", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_a_helper_seen_before_its_exec_counts_under_its_role() -> None:
    bench = _bench()
    proc = subprocess.Popen([sys.executable, "-c", PARENT])
    watch = bench.CpuWatch(proc.pid)
    _, status, usage = os.wait4(proc.pid, 0)
    assert status == 0
    shares = watch.shares(usage.ru_utime + usage.ru_stime)
    assert shares.get("reader", 0.0) > 0.3, shares
    assert shares["checkpoints and other"] < shares["reader"], shares
