"""`strata replay` as a user runs it."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from tests.cli.test_cli import run
from tests.paths import CONFORMANCE

CONFORMANCE = CONFORMANCE


def test_json_output_is_the_canonical_snapshot():
    out = run("replay", str(CONFORMANCE / "c04.jsonl"), "--output", "json")
    assert out.returncode == 0, out.stderr
    expected = json.loads((CONFORMANCE / "c04.expected.json").read_text())
    assert json.loads(out.stdout) == expected
    canonical = json.dumps(expected, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    assert out.stdout == canonical + "\n"
    digest = run("replay", str(CONFORMANCE / "c04.jsonl"), "--digest")
    assert digest.stdout.strip() == hashlib.sha256(canonical.encode()).hexdigest()


def test_until():
    out = run("replay", str(CONFORMANCE / "c04.jsonl"), "--until", "500")
    assert json.loads(out.stdout) == json.loads((CONFORMANCE / "c04.until-500.expected.json").read_text())


def test_bad_records_are_reported_with_line_numbers_and_strict_stops():
    trace = CONFORMANCE / "c03.jsonl"
    out = run("replay", str(trace), "--digest")
    assert out.returncode == 0
    assert f"{trace}:104: bad record: JSONDecodeError" in out.stderr
    assert f"{trace}:191: bad record: unknown record type 'PATCHED'" in out.stderr
    assert "9 bad record(s) of 601" in out.stderr
    strict = run("replay", str(trace), "--strict")
    assert strict.returncode == 1 and strict.stdout == ""
    assert strict.stderr.strip() == f"strata: error: {trace}:11: bad record: metadata.uid is missing"


def test_table_output():
    out = run("replay", str(CONFORMANCE / "example.jsonl"), "-o", "table")
    assert out.returncode == 0
    for word in ("version 5", "nodes (1)", "n1", "jobs (1)", "ns/pg1", "queues (1)", "default"):
        assert word in out.stdout


def test_fold_options(tmp_path: Path):
    trace = tmp_path / "t.jsonl"
    trace.write_text(
        '{"type":"ADDED","object":{"apiVersion":"scheduling.volcano.sh/v1beta1","kind":"Queue","metadata":{"name":"q"}}}\n'
        '{"type":"ADDED","object":{"apiVersion":"scheduling.volcano.sh/v1beta1","kind":"PodGroup",'
        '"metadata":{"name":"pg","namespace":"ns"}}}\n'
        '{"type":"ADDED","object":{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p","namespace":"ns","uid":"u",'
        '"annotations":{"scheduling.k8s.io/group-name":"pg"}},"spec":{"schedulerName":"mine"}}}\n'
    )
    default = json.loads(run("replay", str(trace)).stdout)
    assert default["jobs"] == {}
    mine = json.loads(run("replay", str(trace), "--scheduler-name", "mine", "--default-queue", "q").stdout)
    assert list(mine["jobs"]["ns/pg"]["tasks"]) == ["u"]


def test_a_missing_trace_is_one_line():
    out = run("replay", "/no/such/trace.jsonl")
    assert (
        out.returncode == 1
        and out.stderr.strip() == "strata: error: cannot read trace /no/such/trace.jsonl: No such file or directory"
    )
