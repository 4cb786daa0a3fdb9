"""Benchmark: `strata ui`'s server time per page at 5,000 nodes / 150,000 pods (issue 15).

    eval "$(.venv/bin/strata dev up)"
    .venv/bin/python bench/ui_bench.py [--trace PATH | --nodes 5000 --pods 150000] [--requests 20]
                                       [--reuse PREFIX --db URL | --topic-prefix PREFIX] [--json PATH]
                                       [--keep] [--cache-mb MB]

On one generated history (`strata gen`, 1.7M records at the default size), published with
`strata ingest --from` into a fresh topic prefix and projected with `strata project
--stop-at-end` (checkpoints every 100,000 records and the audit index), `strata ui --port 0`
serves the pages. Server time is the ``Server-Timing: app;dur=`` the UI puts on every response
(from the request's arrival to the start of its response: the page computed and rendered); the
client's wall time is printed beside it.

* floor: a static file (``/static/ui.css``), the server's own overhead per request;
* live: every page and its /api/ twin at the live version (the log's end), ``--requests`` each;
* near: past versions near one already asked for: one version V some 20,000 records back is
  asked for first (cold, timed alone: a checkpoint restored and folded forward), then each
  request asks for another version within the 15,000 records before V or the 2,048 after it
  (anchors are laid every 1,024 records over the 16,384 before V while it is folded), a
  different version every request;
* far: versions 20,000 to 120,000 records before V, a different one each request, after the
  fold toward V (which lays a coarse anchor every 8,192 records over all it folded, within
  ``--cache-mb``): reported, not in the pass line;
* cold: versions far from anything cached (reported, not in the pass line);
* anywhere: a version drawn at random over the whole history each request (reported, not in
  the pass line).

Before the scenarios the bench waits for the UI's survey of the history (anchors laid from the
log's first record in the background) and reports its time, anchors and memory.

Pass line: p99 server time of every page, live and near, at most 300 ms, printed as it is;
and the same line at this machine's speed, which decides the bench's exit: the budget times the
survey's time over SURVEY_REF_S, its time in the runs where the 300 ms line was set (never less
than 300 ms). The survey is the same fold of the same history in the UI's own process, measured
in the same run: on days when this machine ran everything two to three times slower, it took
58-90 s against 24-28 s, and the pages slowed with it. The control starts the UI again with
``--cache-mb 0`` (no anchor nor snapshot kept beyond the newest): the near versions then each
need a restore, and the line at this machine's speed must fail; if it does not, the bench says
so and exits 1. The README's test command runs it whole at the default size with
``--requests 10`` (``tests/ui/test_ui_budget.py``): the line at speed and its control hold there.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

from strata.dev.faults.common import percentile, rss_mb
from strata.log.config import settings_from
from strata.log.topics import drop_topics, ensure_topics

REPO = Path(__file__).resolve().parent.parent
STRATA = [sys.executable, "-m", "strata.cli"]
LAUNCH = (
    "import sys; from strata.cli import main; from strata.cli.ui import ui; "
    "ui.name in main.commands or main.add_command(ui); main(sys.argv[1:], prog_name='strata')"
)
BUDGET_MS = 300.0
# The survey folds the whole history in the UI's process before the scenarios: the same work in
# every run, so its time says how fast this machine runs this workload now. It took 24-28 s in
# the runs where the 300 ms line was set and held (docs/ui.md, runs J to O and A3), and 58-90 s
# on days when everything here ran two to three times slower.
SURVEY_REF_S = 27.0
SHOW_STEPS_MS = 200.0  # a page's slowest answer is shown step by step when its p99 passes this
NEAR_BACK = 20_000  # records behind the log's end of the first past version asked for
NEAR_BEFORE = 15_000  # near versions: up to this many records before it (anchors are laid over 16,384)
NEAR_AFTER = 2_048  # and this many after
COLD_VERSIONS = 3
SURVEY_WAIT_S = 1800.0
FAR_BACK = (20_000, 120_000)  # far versions: this many records before the first past version


@dataclass
class Timing:
    server_ms: list[float] = field(default_factory=list)
    wall_ms: list[float] = field(default_factory=list)
    slowest: str = ""  # the slowest answer's version and steps (its Server-Timing)

    def add(self, server: float, wall: float, steps: str = "") -> None:
        if not self.server_ms or server > max(self.server_ms):
            self.slowest = steps
        self.server_ms.append(server)
        self.wall_ms.append(wall)

    def p(self, q: int, wall: bool = False) -> float:
        values = sorted(self.wall_ms if wall else self.server_ms)
        return float(percentile(values, q)) if values else 0.0  # type: ignore[arg-type]


def run(cmd: list[str], env: dict[str, str], what: str) -> float:
    started = time.perf_counter()
    done = subprocess.run(cmd, env=env, cwd=REPO, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{what} failed:\n{done.stderr[-2000:]}")
    return time.perf_counter() - started


STEPS: dict[str, str] = {}  # path -> the Server-Timing steps of its last answer, besides "app"


def get(base: str, path: str) -> tuple[dict[str, Any] | bytes, float, float]:
    started = time.perf_counter()
    with urllib.request.urlopen(base + path, timeout=600) as response:
        body = response.read()
        timing = ", ".join(response.headers.get_all("server-timing") or [])
        ctype = response.headers.get("content-type", "")
    wall = (time.perf_counter() - started) * 1000
    found = re.search(r"\bapp;dur=([0-9.]+)", timing)
    server = float(found.group(1)) if found else wall
    STEPS[path] = ", ".join(step for step in timing.split(", ") if step and not step.startswith("app;"))
    return (json.loads(body) if ctype.startswith("application/json") else body), server, wall


class Ui:
    """`strata ui --port 0` in a process of its own."""

    def __init__(self, env: dict[str, str], *args: str) -> None:
        started = time.perf_counter()
        self.process = subprocess.Popen(
            [sys.executable, "-c", LAUNCH, "ui", "--port", "0", "--no-index", *args],
            env=env,
            cwd=REPO,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert self.process.stderr is not None
        for line in self.process.stderr:
            found = re.search(r"strata ui: (http://\S+)/ ", line)
            if found:
                self.base = found.group(1)
                break
        else:
            raise SystemExit("strata ui did not start")
        threading.Thread(target=lambda: [None for _ in self.process.stderr or []], daemon=True).start()
        self.started_s = time.perf_counter() - started

    def rss(self) -> float:
        return rss_mb(self.process.pid)

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=60)


def subjects(base: str) -> dict[str, str]:
    """A job, one of its pods, that pod's node, and a pending pod if there is one, at the log's end."""
    cluster, _, _ = get(base, "/api/cluster")
    assert isinstance(cluster, dict)
    rows = [r for r in cluster["jobs"]["rows"] if r["tasks"]]
    job = rows[len(rows) // 2]
    detail, _, _ = get(base, f"/api/job/{quote(job['namespace'])}/{quote(job['name'], safe='')}")
    assert isinstance(detail, dict)
    task = next(t for t in detail["tasks"] if t["node"])
    found = {
        "job": f"{quote(job['namespace'])}/{quote(job['name'], safe='')}",
        "pod": f"{quote(task['namespace'])}/{quote(task['name'], safe='')}",
        "node": quote(task["node"], safe=""),
    }
    for page in range(20):  # a job with a pending task, whose why panel checks every node
        listed, _, _ = get(base, f"/api/cluster?page={page}")
        assert isinstance(listed, dict)
        waiting = [r for r in listed["jobs"]["rows"] if r["tasks"].get("Pending")]
        if waiting:
            found["pending job"] = f"{quote(waiting[0]['namespace'])}/{quote(waiting[0]['name'], safe='')}"
            break
    return found


def pages(s: dict[str, str]) -> dict[str, str]:
    pending = {"pending job": f"/job/{s['pending job']}"} if "pending job" in s else {}
    return {
        **pending,
        "cluster": "/",
        "job": f"/job/{s['job']}",
        "pod": f"/pod/{s['pod']}",
        "node": f"/node/{s['node']}",
        "replicas": "/replicas",
        "api cluster": "/api/cluster",
        "api job": f"/api/job/{s['job']}",
        "api pod": f"/api/pod/{s['pod']}",
        "api node": f"/api/node/{s['node']}",
        "api history job": f"/api/history/job/{s['job']}",
        "api why job": f"/api/why/job/{s['job']}",
    }


def with_version(path: str, version: int | None) -> str:
    return path if version is None else f"{path}{'&' if '?' in path else '?'}v={version}"


def measure(ui: Ui, paths: dict[str, str], requests: int, versions: list[int] | None) -> dict[str, Timing]:
    """Each page ``requests`` times, interleaved; at the next of ``versions`` each time (None: live).
    Requests over the budget are named as they happen."""
    out = {name: Timing() for name in paths}
    k = 0
    for _ in range(requests):
        for name, path in paths.items():
            version = versions[k % len(versions)] if versions else None
            k += 1
            asked = with_version(path, version)
            _, server, wall = get(ui.base, asked)
            out[name].add(server, wall, f"version {version or 'live'}: {STEPS[asked]}")
            if server > BUDGET_MS:
                print(f"    over: {name} at version {version or 'live'}: {server:.0f} ms ({STEPS[asked]})", flush=True)
    return out


def near_versions(v0: int, count: int, seed: int = 7) -> list[int]:
    rng = random.Random(seed)
    return [v0 + rng.randint(-NEAR_BEFORE + 1, NEAR_AFTER) for _ in range(count)]


def report(
    title: str, timings: dict[str, Timing], floor: Timing, budget_ms: float = BUDGET_MS
) -> tuple[list[str], bool]:
    lines = [f"{title}: server time (Server-Timing) p50 / p99 ms, and the client's wall p50"]
    ok = True
    for name, t in timings.items():
        within = t.p(99) <= budget_ms
        ok &= within
        lines.append(
            f"  {name:<16} {t.p(50):8.1f} {t.p(99):8.1f}   wall {t.p(50, wall=True):8.1f}   "
            f"({t.p(50) / max(floor.p(50), 0.01):6.0f}x floor){'' if within else '  OVER'}"
        )
        if t.p(99) > SHOW_STEPS_MS and t.slowest:
            lines.append(f"      slowest, {t.slowest}")
    return lines, ok


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trace", type=Path, help="a history to publish (default: strata gen at --nodes/--pods)")
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--pods", type=int, default=150_000)
    parser.add_argument("--requests", type=int, default=20, help="requests per page and scenario")
    parser.add_argument("--reuse", metavar="PREFIX", help="a topic prefix already published and projected")
    parser.add_argument("--db", metavar="URL", help="its checkpoint store (with --reuse)")
    parser.add_argument("--topic-prefix", help="publish under this topic prefix (default: a new bench-ui-... one)")
    parser.add_argument("--keep", action="store_true", help="keep the topics, the history and the database")
    parser.add_argument("--json", type=Path, help="write the figures here too")
    parser.add_argument("--cache-mb", type=int, help="strata ui's --cache-mb (default: its own; the control: 0)")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="strata-ui-bench-"))
    settings = settings_from()
    prefix = args.reuse or args.topic_prefix or f"bench-ui-{uuid.uuid4().hex[:10]}."
    db = args.db or f"sqlite:///{work / 'ui.db'}"
    env = {**os.environ, "STRATA_TOPIC_PREFIX": prefix, "STRATA_DB_URL": db, "STRATA_LOG_LEVEL": "WARNING"}
    figures: dict[str, Any] = {"prefix": prefix}
    try:
        if not args.reuse:
            trace = args.trace
            if trace is None:
                trace = work / "history.jsonl"
                gen = ["gen", "--nodes", str(args.nodes), "--pods", str(args.pods), "-o", str(trace)]
                figures["gen_s"] = run([*STRATA, *gen], env, "strata gen")
            ensure_topics(settings.with_(topic_prefix=prefix))
            figures["ingest_s"] = run([*STRATA, "ingest", "--from", str(trace)], env, "strata ingest")
            figures["project_s"] = run([*STRATA, "project", "--stop-at-end"], env, "strata project")
            print(f"published in {figures['ingest_s']:.0f} s, projected in {figures['project_s']:.0f} s", flush=True)
        ok = bench(env, args.requests, figures, args.cache_mb)
    finally:
        if not args.keep and not args.reuse:
            drop_topics(settings.with_(topic_prefix=prefix))
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)  # the history (1.3 GB at the default size) and the database
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))
    sys.exit(0 if ok else 1)


def bench(env: dict[str, str], requests: int, figures: dict[str, Any], cache_mb: int | None = None) -> bool:
    ui = Ui(env, *(["--cache-mb", str(cache_mb)] if cache_mb is not None else []))
    try:
        end, _, _ = get(ui.base, "/api/version")
        assert isinstance(end, dict)
        live = end["version"]
        print(f"strata ui started in {ui.started_s:.1f} s at version {live}, RSS {ui.rss():.0f} MB", flush=True)
        figures["survey"] = wait_for_survey(ui)
        # how much slower than the reference this machine runs the same fold now (a survey cut
        # short by the wait says nothing: no allowance then)
        survey = figures["survey"]
        speed = max(1.0, survey["seconds"] / SURVEY_REF_S) if survey["done"] else 1.0
        paths = pages(subjects(ui.base))
        floor = measure(ui, {"floor": "/static/ui.css"}, requests * 3, None)["floor"]
        print(f"floor (/static/ui.css): p50 {floor.p(50):.1f} ms, p99 {floor.p(99):.1f} ms", flush=True)
        at_live = measure(ui, paths, requests, None)
        lines, live_ok = report("live version", at_live, floor)
        print("\n".join(lines), flush=True)
        v0 = live - NEAR_BACK
        _, cold_first, _ = get(ui.base, f"/?v={v0}")
        print(f"first past version {v0} (from the nearest anchor or checkpoint): {cold_first:.0f} ms", flush=True)
        print(f"    ({STEPS[f'/?v={v0}']})", flush=True)
        page_paths = {k: v for k, v in paths.items() if not k.startswith("api") and k != "replicas"}
        near = measure(ui, page_paths, requests, near_versions(v0, requests * len(page_paths)))
        lines, near_ok = report(f"past versions near {v0} (a new version each request)", near, floor)
        print("\n".join(lines), flush=True)
        rng = random.Random(13)
        far_versions = [v0 - rng.randint(*FAR_BACK) for _ in range(requests * len(page_paths))]
        far = measure(ui, page_paths, requests, far_versions)
        title = f"far versions, {FAR_BACK[0]:,} to {FAR_BACK[1]:,} records before {v0} (not in the pass line)"
        lines, _ = report(title, far, floor)
        print("\n".join(lines), flush=True)
        cold = Timing()
        for i in range(COLD_VERSIONS):
            _, server, wall = get(ui.base, f"/?v={(i + 1) * live // (COLD_VERSIONS + 2)}")
            cold.add(server, wall)
        print(f"cold past versions (far from anything cached): {', '.join(f'{x:.0f}' for x in cold.server_ms)} ms")
        anywhere_versions = [rng.randrange(live) for _ in range(requests * len(page_paths))]
        anywhere = measure(ui, page_paths, requests, anywhere_versions)
        title = "anywhere in the history, a version drawn at random each request (not in the pass line)"
        lines, _ = report(title, anywhere, floor)
        print("\n".join(lines), flush=True)
        figures.update(
            ui_start_s=ui.started_s,
            rss_mb=ui.rss(),
            floor_ms=[floor.p(50), floor.p(99)],
            live_ms={name: [t.p(50), t.p(99)] for name, t in at_live.items()},
            near_ms={name: [t.p(50), t.p(99)] for name, t in near.items()},
            first_past_ms=cold_first,
            far_ms={name: [t.p(50), t.p(99)] for name, t in far.items()},
            cold_ms=cold.server_ms,
            anywhere_ms={name: [t.p(50), t.p(99)] for name, t in anywhere.items()},
        )
        print(f"RSS after: {ui.rss():.0f} MB")
    finally:
        ui.stop()
    passed = live_ok and near_ok
    budget = BUDGET_MS * speed
    at_speed = all(t.p(99) <= budget for t in [*at_live.values(), *near.values()])
    print(f"PASS LINE (p99 <= {BUDGET_MS:.0f} ms on every page, live and near): {'PASS' if passed else 'FAIL'}")
    print(
        f"PASS LINE AT THIS MACHINE'S SPEED (p99 <= {BUDGET_MS:.0f} ms x the survey's "
        f"{figures['survey']['seconds']:.0f} s / {SURVEY_REF_S:.0f} s = {budget:.0f} ms): "
        + ("PASS" if at_speed else "FAIL")
    )
    control_ok = control(env, requests, v0, page_paths, floor, budget)
    print(
        f"CONTROL (--cache-mb 0, the same near versions, against {budget:.0f} ms): "
        f"{'FAIL, as it must' if not control_ok else 'PASS?!'}"
    )
    if control_ok:
        print("the control did not fail: the pass line cannot tell a cache from none")
    figures.update(passed=passed, speed=speed, budget_ms=budget, passed_at_speed=at_speed)
    figures.update(control_failed=not control_ok)
    return at_speed and not control_ok


def wait_for_survey(ui: Ui) -> dict[str, Any]:
    """Wait for the UI's survey of the history (anchors from the log's first record), and say
    what it took and keeps."""
    started = time.perf_counter()
    while True:
        version, _, _ = get(ui.base, "/api/version")
        assert isinstance(version, dict)
        # a UI without a survey (an older one, measured for comparison) counts as done
        survey = dict(version["cache"].get("survey", {"done": True, "anchors": 0, "spacing": 0, "bytes": 0}))
        if survey["done"] or time.perf_counter() - started > SURVEY_WAIT_S:
            break
        time.sleep(1.0)
    survey.update(seconds=time.perf_counter() - started, rss_mb=ui.rss())
    print(
        f"survey of the history: {survey['seconds']:.0f} s, {survey['anchors']} whole states "
        f"{survey['spacing']:,} records apart, {survey.get('points', 0)} points {survey.get('step', 0):,} apart, "
        f"{survey['bytes'] >> 20} MB charged, RSS {survey['rss_mb']:.0f} MB"
        + ("" if survey["done"] else " (NOT DONE)"),
        flush=True,
    )
    return survey


def control(
    env: dict[str, str], requests: int, v0: int, paths: dict[str, str], floor: Timing, budget_ms: float
) -> bool:
    ui = Ui(env, "--cache-mb", "0")
    try:
        # No first request at v0 as the measured run makes: with no cache it lays no anchor, and
        # cost the test 10 s. Each request is a restore (7-10 s here): a few show it.
        few = max(1, requests // 10)
        near = measure(ui, paths, few, near_versions(v0, few * len(paths), seed=11))
        lines, ok = report("control: no cache", near, floor, budget_ms)
        print("\n".join(lines), flush=True)
        return ok
    finally:
        ui.stop()


if __name__ == "__main__":
    main()
