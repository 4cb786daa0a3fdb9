"""The behaviour a restructure must leave unchanged, as one line of digests per item.

Run it before and after moving modules and compare the two outputs (`diff`): each conformance
trace's canonical snapshot (as JSON and as a digest, in full and at `--until` where an expected
file names one), `strata gen` at three settings, and the help of every command of the CLI. It
runs the `strata` command the environment has, so it fingerprints whatever tree is installed or
put first on PYTHONPATH.

    python scripts/fingerprint.py [--shared ../shared] > before.txt
"""

from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
import sys
from pathlib import Path

import click
from click.testing import CliRunner

REPO = Path(__file__).resolve().parent.parent
GEN = [("--nodes", "40", "--pods", "600", "--seed", "1"), ("--nodes", "120", "--pods", "3000", "--seed", "7")]
GEN += [("--nodes", "25", "--pods", "400", "--queues", "3", "--churn", "0.5", "--replicas", "2", "--seed", "3")]


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]


def _strata(*args: str) -> bytes:
    done = subprocess.run(["strata", *args], capture_output=True, check=False)
    return done.stdout + f"\n[exit {done.returncode}] ".encode() + done.stderr


def _traces(shared: Path | None) -> list[Path]:
    folders = [REPO / "tests" / "conformance"]
    if shared is not None:
        folders += [shared / "conformance", shared / "conformance-v1.1"]
    return sorted({p for f in folders if f.is_dir() for p in f.glob("*.jsonl")}, key=lambda p: (p.name, str(p)))


def _helps(group: click.Group) -> list[tuple[str, str]]:
    """(command path, digest of its --help) for the CLI, each group and each of its commands."""
    found = []
    paths: list[tuple[str, ...]] = [()]
    while paths:
        path = paths.pop()
        out = CliRunner().invoke(group, [*path, "--help"], prog_name="strata", terminal_width=100).output
        found.append((" ".join(("strata", *path)), _sha(out.encode())))
        command = group
        for name in path:
            command = command.commands[name]
        if isinstance(command, click.Group):
            paths += [(*path, name) for name in sorted(command.commands, reverse=True)]  # depth first, sorted
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shared", type=Path, default=REPO.parent / "shared")
    args = parser.parse_args()
    os.environ.setdefault("COLUMNS", "100")
    for trace in _traces(args.shared):
        name = f"{trace.parent.name}/{trace.name}"
        print(name, "digest", _strata("replay", str(trace), "--digest").split()[0].decode())
        print(name, "json", _sha(_strata("replay", str(trace), "--output", "json")))
        for until in sorted(trace.parent.glob(trace.stem + ".until-*.expected.json")):
            n = until.name.split(".until-")[1].split(".")[0]
            print(name, f"until-{n}", _sha(_strata("replay", str(trace), "--until", n, "--output", "json")))
    for setting in GEN:
        print("gen", " ".join(setting), _sha(_strata("gen", *setting)))
    from strata.cli import main as cli

    for name, digest in _helps(cli):
        print("help", name, digest)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
