"""The README stays short, every relative link in the README, docs/ and the folders' READMEs leads to a file,
and the reference pages name no issue numbers (dated run reports, which may, live in docs/results/)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tools.paths import REPO_ROOT

README = REPO_ROOT / "README.md"
MAX_README_LINES = 250
PAGES = [README, *sorted((REPO_ROOT / "docs").rglob("*.md")), REPO_ROOT / "docker" / "README.md", REPO_ROOT / "loadtest" / "README.md"]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCED = re.compile(r"^```.*?^```", flags=re.S | re.M)
# "issue 31", "issues 7 and 8", "#31": a tracker number means nothing to a reader of the page.
ISSUE_NUMBER = re.compile(r"\bissues? #?\d+|(?<![\w/&#])#\d+\b", flags=re.I)
REFERENCE_PAGES = [README, *sorted((REPO_ROOT / "docs").glob("*.md")), *sorted((REPO_ROOT / "docs" / "decisions").glob("*.md"))]


def relative_links(page: Path) -> list[str]:
    """Link targets outside code blocks that point into the repository (no URL, no bare anchor)."""
    text = FENCED.sub("", page.read_text())
    return [target for target in LINK.findall(text) if not re.match(r"[a-z]+:|#", target)]


def test_readme_is_at_most_250_lines() -> None:
    lines = len(README.read_text().splitlines())
    assert lines <= MAX_README_LINES, f"README.md has {lines} lines; move detail to docs/"


def test_readme_and_docs_link_to_other_pages() -> None:
    assert relative_links(README) and any(relative_links(page) for page in PAGES[1:])


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(REPO_ROOT)))
def test_every_relative_link_points_to_an_existing_file(page: Path) -> None:
    missing = [target for target in relative_links(page) if not (page.parent / target.split("#", 1)[0]).exists()]
    assert not missing, f"{page.relative_to(REPO_ROOT)} links to missing files: {missing}"


def test_the_link_check_sees_a_missing_file(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("[ok](page.md) [gone](gone.md#part) [web](https://example.com) [here](#top)\n```\n[code](x.md)\n```\n")
    assert relative_links(page) == ["page.md", "gone.md#part"]


def issue_numbers(page: Path) -> list[str]:
    return ISSUE_NUMBER.findall(page.read_text())


@pytest.mark.parametrize("page", REFERENCE_PAGES, ids=lambda page: str(page.relative_to(REPO_ROOT)))
def test_reference_pages_name_no_issue_numbers(page: Path) -> None:
    found = issue_numbers(page)
    assert not found, f"{page.relative_to(REPO_ROOT)} names issue numbers {found}: say what was found, or move the run to docs/results/"


def test_the_issue_check_sees_issue_numbers(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("Fixed in issue 31 (#31, Issues 7); [upstream](https://github.com/o/r/issues/12), [part](#part), &#123;\n")
    assert issue_numbers(page) == ["issue 31", "#31", "Issues 7"]
