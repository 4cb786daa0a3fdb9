"""Every repository path that README.md and docs/*.md name exists in the checkout.

A path is taken from an inline code span (`strata/cli/main.py`) when its first component is one of
the repository's top-level entries, and from every markdown link target ([x](docs/ui.md), relative
to the markdown file's folder). Fenced code blocks are commands and output, not names, and are left
out. A `::test_name` or `:line` suffix is dropped before the check.
"""

from __future__ import annotations

import re
from pathlib import Path, PurePosixPath

from tests.paths import REPO

TOP = frozenset(
    {
        "strata",
        "projector",
        "ingest",
        "binder",
        "scheduler",
        "schemas",
        "tests",
        "docs",
        "deploy",
        "bench",
        "scripts",
        "strata-volcano",
        ".ci",
        "compose.yaml",
        "pyproject.toml",
        "Dockerfile",
        "README.md",
    }
)
NOT_A_PATH = re.compile(r"[\s<>*${}=]")

# Paths the docs name on purpose that are not in the checkout, each with why. Keep it short.
ALLOWED: frozenset[str] = frozenset()

FENCE = re.compile(r"^\s*(`{3,}|~{3,})")  # in a list item too
CODE_SPAN = re.compile(r"(?<!`)(`+)(?!`)(.+?)(?<!`)\1(?!`)", re.DOTALL)
LINK = re.compile(r"\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
SUFFIX = re.compile(r"(::[\w\[\]\-.,]+)+$|:\d+(-\d+)?$")


def _without_fences(text: str) -> str:
    """The text with every fenced code block's lines blanked (line numbers stay)."""
    lines, fence = [], ""
    for line in text.split("\n"):
        match = FENCE.match(line)
        if fence:
            if match and match.group(1)[0] == fence[0] and len(match.group(1)) >= len(fence):
                fence = ""
            lines.append("")
        elif match:
            fence = match.group(1)
            lines.append("")
        else:
            lines.append(line)
    return "\n".join(lines)


def named_paths(text: str, folder: PurePosixPath) -> list[tuple[int, str]]:
    """(line, path from the repository root) for every repository path the markdown text names.

    `folder` is the markdown file's folder, relative to the repository root (link targets are
    relative to it)."""
    text = _without_fences(text)
    found: list[tuple[int, str]] = []

    def line_of(offset: int) -> int:
        return text.count("\n", 0, offset) + 1

    for span in CODE_SPAN.finditer(text):
        candidate = span.group(2).strip()
        if not candidate or NOT_A_PATH.search(candidate):
            continue
        candidate = SUFFIX.sub("", candidate)
        if candidate.split("/")[0] in TOP:
            found.append((line_of(span.start()), candidate.rstrip("/") or candidate))
    # links inside code spans are not links; blank the spans, keeping offsets
    bare = CODE_SPAN.sub(lambda m: " " * len(m.group(0)), text)
    for link in LINK.finditer(bare):
        target = link.group(1)
        if re.match(r"[a-z][a-z0-9+.-]*:", target, re.IGNORECASE) or target.startswith("#"):
            continue  # http(s), mailto: and the like; an anchor in the same file
        target = SUFFIX.sub("", target.split("#", 1)[0])
        if not target:
            continue
        path = PurePosixPath(target.lstrip("/")) if target.startswith("/") else folder / target
        found.append((line_of(link.start()), _normalized(path)))
    return found


def _normalized(path: PurePosixPath) -> str:
    parts: list[str] = []
    for part in path.parts:
        if part == "..":
            if parts and parts[-1] != "..":
                parts.pop()
            else:
                parts.append(part)
        elif part != ".":
            parts.append(part)
    return "/".join(parts) or "."


def missing_paths(text: str, folder: PurePosixPath, repo: Path = REPO) -> list[tuple[int, str]]:
    named = named_paths(text, folder)
    return [(line, path) for line, path in named if path not in ALLOWED and not (repo / path).exists()]


def markdown_files() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def test_every_path_the_docs_name_exists():
    missing = []
    for markdown in markdown_files():
        name = markdown.relative_to(REPO).as_posix()
        folder = PurePosixPath(name).parent
        for line, path in missing_paths(markdown.read_text(encoding="utf-8"), folder):
            missing.append(f"{name}:{line}: {path}")
    assert not missing, "paths the docs name that are not in the checkout:\n" + "\n".join(missing)


def test_the_check_reports_a_path_that_moved():
    text = (
        "The fold is in `projector/state.py` (see [the state](../projector/state.py#L3)),\n"
        "now `projector/fold/state.py::test_x` and [here](../projector/fold/state.py:12); "
        "`strata why` and [Volcano](https://volcano.sh) are no paths.\n"
        "```\nbash `projector/gone.py`\n```\n"
    )
    assert named_paths(text, PurePosixPath("docs")) == [
        (1, "projector/state.py"),
        (2, "projector/fold/state.py"),
        (1, "projector/state.py"),
        (2, "projector/fold/state.py"),
    ]
    assert missing_paths(text, PurePosixPath("docs")) == [(1, "projector/state.py"), (1, "projector/state.py")]
