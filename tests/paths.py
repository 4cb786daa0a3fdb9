"""Where the tests find the repository's files, wherever a test module sits below tests/."""

from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CONFORMANCE = REPO / "tests" / "conformance"
SHARED = REPO.parent / "shared"  # the contracts beside a checkout (spec, conformance traces), when present
SAMPLE = REPO / "strata" / "dev" / "samples" / "sample-cluster.jsonl"
