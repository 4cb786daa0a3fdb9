"""The import contracts of pyproject.toml (docs/layers.md) hold, and each wrong import they exist
to stop breaks them: `lint-imports` runs on a copy of the package with one import added."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.paths import REPO

LINT = str(Path(sys.executable).with_name("lint-imports"))

# (the module that gains the import, the import, the contract that must break)
WRONG = [
    ("projector/fold/state.py", "import strata.log.cachelog", "The fold is pure"),
    ("projector/fold/kinds.py", "import strata.projector.runner", "The projector: its edges above the pure fold"),
    ("strata/audit/history.py", "import strata.cli.options", "Layers: each imports"),
    ("scheduler/cache.py", "import strata.dev.gen", "Layers: each imports"),
    ("projector/runner.py", "import strata.dev.stack", "Layers: each imports"),
    ("ingest/watch.py", "import strata.binder.txn", "Layers: each imports"),
    ("strata/log/cachelog.py", "import strata.projector.fold.state", "Layers: each imports"),
]


def _lint(root: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(root)}  # the copy's `strata` before the checkout's
    return subprocess.run(
        [LINT, "--config", str(REPO / "pyproject.toml"), "--no-cache"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )


def _copy(tmp_path: Path) -> Path:
    shutil.copytree(
        REPO / "strata", tmp_path / "strata", ignore=shutil.ignore_patterns("__pycache__", "go", "static", "templates")
    )  # the symlinked packages become folders of the copy
    return tmp_path


def test_the_contracts_hold():
    done = _lint(REPO)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize(("module", "line", "contract"), WRONG, ids=[f"{m}:{i}" for m, i, _ in WRONG])
def test_a_wrong_import_breaks_a_contract(tmp_path: Path, module: str, line: str, contract: str):
    root = _copy(tmp_path)
    target = root / "strata" / module.removeprefix("strata/")
    target.write_text(target.read_text() + f"\n{line}  # a deliberate wrong import\n")
    done = _lint(root)
    assert done.returncode != 0, done.stdout
    _, _, broken = done.stdout.partition("Broken contracts")  # the report's section of each broken one
    assert contract in broken, done.stdout


def test_a_module_in_no_layer_breaks_the_layers(tmp_path: Path):
    root = _copy(tmp_path)
    (root / "strata" / "stray.py").write_text('"""A module of strata that no layer names."""\n')
    done = _lint(root)
    assert done.returncode != 0 and "strata.stray" in done.stdout, done.stdout
