"""Strata installs under one import name, `strata`, and works beside modules named like its parts.

The wheel is built from this checkout, installed into a fresh venv whose site-packages also holds
a `schemas` module and a `scheduler` package that refuse to be imported (as an application's own
would shadow Strata's), and `strata replay --digest` runs from there on a conformance trace.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path
from typing import Any

import pytest

from tests.paths import REPO

TRACE = REPO / "tests" / "conformance" / "c04.jsonl"
IGNORED = (".git", ".venv", ".strata", "build", "dist", "*.egg-info", "__pycache__", ".*_cache")
SHADOW = "raise ImportError('a module of the application, not Strata: Strata must not import it')\n"


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv with the wheel built from this checkout installed: its site-packages."""
    tmp_path = tmp_path_factory.mktemp("wheel")
    # from a copy: a build in the checkout would leave build/ behind, and stale files in it
    source = tmp_path / "source"
    shutil.copytree(REPO, source, symlinks=True, ignore=shutil.ignore_patterns(*IGNORED))
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--wheel-dir", str(tmp_path), str(source)],
        check=True,
        capture_output=True,
    )
    (wheel,) = tmp_path.glob("strata-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")} == {"strata"}
    assert "strata/schemas/avsc/WatchEvent.v1.avsc" in names and "strata/projector/migrations/env.py" in names

    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=False)
    site = Path(sysconfig.get_path("purelib", vars={"base": str(env_dir), "platbase": str(env_dir)}))
    # Strata's dependencies come from this interpreter's site-packages (no index needed); a
    # directory added by a .pth line does not run the .pth files in it, so this checkout's
    # editable install stays out of the new venv
    deps = Path(sysconfig.get_path("purelib"))
    (site / "deps.pth").write_text(f"{deps}\n")
    python = env_dir / "bin" / "python"
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet", "--no-deps", str(wheel)],
        check=True,
        capture_output=True,
    )
    return site


def test_the_wheel_has_one_import_name_and_runs_beside_shadowing_modules(installed: Path, tmp_path: Path):
    site = installed
    env_dir = site.parents[2]
    python = env_dir / "bin" / "python"
    (site / "schemas.py").write_text(SHADOW)
    (site / "scheduler").mkdir()
    (site / "scheduler" / "__init__.py").write_text(SHADOW)

    where = subprocess.run(
        [python, "-c", "import strata.scheduler, strata.schemas; print(strata.schemas.__file__)"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert where.returncode == 0, where.stderr
    assert where.stdout.startswith(str(site / "strata")), where.stdout
    ran = subprocess.run(
        [env_dir / "bin" / "strata", "replay", str(TRACE), "--digest"], capture_output=True, text=True, cwd=tmp_path
    )
    here = subprocess.run(
        [sys.executable, "-m", "strata.cli", "replay", str(TRACE), "--digest"], capture_output=True, text=True
    )
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout == here.stdout and len(here.stdout.strip()) == 64


# The command, run by the wheel's interpreter, noting every process it starts (its argv).
CHILDREN = """
import sys
started = []
sys.addaudithook(lambda event, args: started.append(args[1]) if event == "subprocess.Popen" else None)
import strata.log.readahead
strata.log.readahead.AHEAD_FROM = 1  # every read of the log through the reader process
from strata.cli import main
try:
    main(sys.argv[1:], prog_name="strata")
finally:
    print(*(" ".join(map(str, argv)) for argv in started), sep="\\n", file=sys.stderr)
"""


@pytest.mark.kafka
def test_the_wheels_helper_processes_and_migrations_start_by_module_path(installed: Path, kafka: Any, tmp_path: Path):
    """The audit index's writer and the log's reader are started as `python -m MODULE`, and the
    checkpoint store's migrations found as `PACKAGE:migrations`: from an installed wheel too."""
    python = installed.parents[2] / "bin" / "python"
    env = {
        **os.environ,
        "STRATA_KAFKA_BOOTSTRAP": kafka.bootstrap,
        "STRATA_TOPIC_PREFIX": kafka.topic_prefix,
        "STRATA_DATA_DIR": str(tmp_path / "data"),
    }

    def strata(*args: str) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [python, "-c", CHILDREN, *args], capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120
        )
        assert done.returncode == 0, done.stderr
        return done

    strata("ingest", "--from", str(TRACE))
    db = tmp_path / "checkpoints.db"
    projected = strata("project", "--stop-at-end", "--db-url", f"sqlite:///{db}")
    assert "-m strata.projector.auditindex.writer" in projected.stderr, projected.stderr
    with sqlite3.connect(db) as sql:  # Alembic made the tables, the writer filled the index
        assert sql.execute("SELECT version_num FROM alembic_version").fetchall()
        assert sql.execute("SELECT count(*) FROM checkpoints").fetchone()[0] >= 1
    read = strata("snapshot", "--digest", "--db-url", f"sqlite:///{tmp_path / 'empty.db'}")
    assert "-m strata.log.readahead" in read.stderr, read.stderr
    here = subprocess.run(
        [sys.executable, "-m", "strata.cli", "replay", str(TRACE), "--digest"], capture_output=True, text=True
    )
    assert read.stdout == here.stdout and len(here.stdout.strip()) == 64
