"""The docs ship with the repo and point only into it.

README.md and docs/*.md are all a user has: every relative link must resolve to a file of the
repo (and a `#fragment` to a heading of the linked page), no file may send the reader to
documents that are not in the repo, and every `mqlab` command the docs name must exist.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

REPO = Path(__file__).resolve().parents[3]
DOC_PAGES = sorted([REPO / "README.md", *(REPO / "docs").glob("*.md")])

# Documents that exist only outside the repo. Built from parts so this file does not match itself.
OUTSIDE_REFERENCES = tuple("".join(parts) for parts in (
    ("DESIGN", ".md"), ("DESIGN", " §"), ("style", "-anchors"), ("shared", "/"), ("reference", "/"),
    ("reference", " §"), ("Reference", " §"), ("chaos", "-anchors"), ("pyspark", "-notes"), ("rocketmq", "-semantics")))
# What the repo is made of: the docs, code, configuration and scripts (not .venv, .venv-py5, node_modules, runs, caches).
_SKIPPED_DIRS = {".git", ".venv", ".venv-py5", "node_modules", "runs", "build", "__pycache__", ".pytest_cache", ".ruff_cache", ".hypothesis"}
_SCANNED_SUFFIXES = {".md", ".py", ".pyi", ".toml", ".proto", ".sh", ".cfg", ".ini", ".txt"}

_LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
_FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)
_INLINE_CODE = re.compile(r"`[^`\n]+`")
_COMMAND = re.compile(r"(?:^|[\s`$(])(?:\./scripts/)?mqlab((?: [a-z][a-z-]*){1,2})")
_HELP_COMMAND = re.compile(r"^\W*([a-z][a-z-]*)\s{2,}\S", re.MULTILINE)


def _repo_files() -> Iterator[Path]:
    for path in REPO.rglob("*"):
        relative = path.relative_to(REPO)
        if any(part in _SKIPPED_DIRS or part.endswith(".egg-info") for part in relative.parts):
            continue
        if path.is_file() and (path.suffix in _SCANNED_SUFFIXES or relative.parts[0] in ("scripts", ".ci")):
            yield path


def _heading_anchors(page: Path) -> set[str]:
    """GitHub's anchors of a page's headings: lower case, punctuation dropped, spaces to hyphens."""
    text = _FENCE.sub("", page.read_text(encoding="utf-8"))
    anchors: set[str] = set()
    for match in re.finditer(r"^#{1,6}\s+(.+?)\s*#*\s*$", text, re.MULTILINE):
        slug = re.sub(r"[^\w\- ]", "", match.group(1).strip().lower()).replace(" ", "-")
        candidate, n = slug, 0
        while candidate in anchors:
            n += 1
            candidate = f"{slug}-{n}"
        anchors.add(candidate)
    return anchors


def _relative_links(page: Path) -> Iterator[str]:
    text = _FENCE.sub("", page.read_text(encoding="utf-8"))
    for target in _LINK.findall(text):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        yield target


def _code_regions(text: str) -> Iterator[str]:
    yield from _FENCE.findall(text)
    yield from _INLINE_CODE.findall(_FENCE.sub("", text))


def _help_commands(args: list[str]) -> set[str]:
    from harness.cli import app

    result = CliRunner().invoke(app, [*args, "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    _, _, commands = result.output.partition("Commands")
    assert commands, f"no Commands section in `mqlab {' '.join(args)} --help`:\n{result.output}"
    return set(_HELP_COMMAND.findall(commands))


def test_docs_exist_and_readme_links_every_page():
    pages = {path.name for path in (REPO / "docs").glob("*.md")}
    assert {"architecture.md", "storage.md", "protocol.md", "history.md", "chaos.md", "benchmark.md"} <= pages
    linked = {Path(target.partition("#")[0]).name for target in _relative_links(REPO / "README.md")}
    assert pages <= linked, f"README.md does not link {sorted(pages - linked)}"


@pytest.mark.parametrize("page", DOC_PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_relative_links_resolve_to_files_and_headings_of_the_repo(page: Path):
    broken = []
    for target in _relative_links(page):
        path_part, _, fragment = target.partition("#")
        linked = (page.parent / path_part).resolve() if path_part else page
        if not linked.is_relative_to(REPO) or not linked.exists():
            broken.append(f"{target}: no such file in the repo")
        elif fragment and linked.suffix == ".md" and fragment not in _heading_anchors(linked):
            broken.append(f"{target}: {linked.name} has no heading #{fragment}")
    assert not broken, f"{page.relative_to(REPO)}: broken links {broken}"


def test_no_file_points_at_documents_outside_the_repo():
    offenders = [
        f"{path.relative_to(REPO)}:{n}: {needle}"
        for path in _repo_files()
        for n, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1)
        for needle in OUTSIDE_REFERENCES
        if needle in line
    ]
    assert not offenders, "references to documents that are not in the repo:\n" + "\n".join(offenders)


def test_the_scan_finds_an_outside_reference():
    # Guards the guard: the needles are assembled at run time, so check they really match.
    line = "see the " + "DESIGN" + ".md of the " + "shared" + "/ docs"
    assert [needle for needle in OUTSIDE_REFERENCES if needle in line] == [OUTSIDE_REFERENCES[0], OUTSIDE_REFERENCES[3]]


def test_every_cli_command_named_in_the_docs_exists():
    top = _help_commands([])
    subcommands: dict[str, set[str]] = {}  # command -> its subcommands (empty: not a group)
    named: set[str] = set()
    missing = []
    for page in DOC_PAGES:
        for region in _code_regions(page.read_text(encoding="utf-8")):
            for words in _COMMAND.findall(region):
                command, *rest = words.split()
                if command not in top:
                    missing.append(f"{page.name}: mqlab {command}")
                    continue
                if command not in subcommands:
                    subcommands[command] = _help_commands([command]) if _is_group(command) else set()
                if subcommands[command] and rest:
                    named.add(f"{command} {rest[0]}")
                    if rest[0] not in subcommands[command]:
                        missing.append(f"{page.name}: mqlab {command} {rest[0]}")
                else:
                    named.add(command)
    assert not missing, f"commands the docs name but `mqlab --help` lacks: {sorted(set(missing))}"
    # the scan itself works: the docs name these, so finding none would mean it matched nothing
    assert {"up", "status", "bench pull", "chaos run", "chaos check", "chaos list"} <= named, sorted(named)


def _is_group(command: str) -> bool:
    from harness.cli import app

    result = CliRunner().invoke(app, [command, "--help"], env={"COLUMNS": "200"})
    return "Commands" in result.output
