"""Strata installs under one import name, `strata`, and works beside modules named like its parts.

The wheel is built from this checkout, installed into a fresh venv whose site-packages also holds
a `schemas` module and a `scheduler` package that refuse to be imported (as an application's own
would shadow Strata's), and `strata replay --digest` runs from there on a conformance trace.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path

from tests.paths import REPO

TRACE = REPO / "tests" / "conformance" / "c04.jsonl"
IGNORED = (".git", ".venv", ".strata", "build", "dist", "*.egg-info", "__pycache__", ".*_cache")
SHADOW = "raise ImportError('a module of the application, not Strata: Strata must not import it')\n"


def test_the_wheel_has_one_import_name_and_runs_beside_shadowing_modules(tmp_path: Path):
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
    installed = subprocess.run(
        [env_dir / "bin" / "strata", "replay", str(TRACE), "--digest"], capture_output=True, text=True, cwd=tmp_path
    )
    here = subprocess.run(
        [sys.executable, "-m", "strata.cli", "replay", str(TRACE), "--digest"], capture_output=True, text=True
    )
    assert installed.returncode == 0, installed.stderr
    assert installed.stdout == here.stdout and len(here.stdout.strip()) == 64
