"""Every relative link of README.md and docs/*.md points at a file that
exists and, with a ``#anchor``, at a heading (or an ``<a name>``) of it,
slugged as GitHub does."""

from __future__ import annotations

import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def prose(path: pathlib.Path) -> str:
    return re.sub(r"```.*?```", "", path.read_text(encoding="utf-8"), flags=re.S)


def slug(heading: str) -> str:
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(path: pathlib.Path) -> set[str]:
    found, seen = set(), {}
    for heading in re.findall(r"^#+ (.*)$", prose(path), re.M):
        s = slug(heading)
        found.add(f"{s}-{seen[s]}" if s in seen else s)
        seen[s] = seen.get(s, 0) + 1
    return found | set(re.findall(r'<a (?:name|id)="([^"]+)"', path.read_text(encoding="utf-8")))


def test_anchors_are_slugged_as_github_does():
    assert slug("A Python worker library: leaseq.client") == "a-python-worker-library-leaseqclient"
    assert slug("Dead letters, dedupe keys, push mode and inspection") == \
        "dead-letters-dedupe-keys-push-mode-and-inspection"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_link_reaches_its_file_and_anchor(page):
    bad = []
    for link in re.findall(r"\]\(([^)\s]+)\)", prose(page)):
        if re.match(r"[a-z]+:", link):          # http:, https:, mailto:
            continue
        path, _, anchor = link.partition("#")
        target = (page.parent / path).resolve() if path else page
        if not target.exists():
            bad.append(f"{link}: no such file")
        elif anchor and target.suffix == ".md" and anchor not in anchors(target):
            bad.append(f"{link}: no such heading")
    assert not bad, f"{page.name}: {bad}"
