"""The documentation holds together: every relative markdown link in README.md, docs/*.md and
benchmarks/**/*.md names a file that exists, and a #anchor names a heading of that file (GitHub's
heading ids); the task pages stay within their length."""
from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LINK = re.compile(r"(?<!!)\[(?:[^\]\[]|\[[^\]]*\])*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
FENCE = re.compile(r"^\s*(```|~~~)")
INLINE_CODE = re.compile(r"`+[^`]*`+")
LIMITS = {"docs/models.md": 250, "docs/training.md": 400}


def pages() -> list[Path]:
    found = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "benchmarks").rglob("*.md"))]
    return [p for p in found if p.is_file()]


def prose_lines(text: str) -> list[tuple[int, str]]:
    """(line number, line) outside fenced code blocks, inline code removed."""
    out, fenced = [], False
    for n, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            out.append((n, INLINE_CODE.sub("", line)))
    return out


def slug(heading: str) -> str:
    """GitHub's id of a heading: link text kept, lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip())
    return re.sub(r"[^\w\- ]", "", text.lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen: Counter[str] = Counter()
    out = set()
    fenced = False
    for line in path.read_text().splitlines():
        if FENCE.match(line):
            fenced = not fenced
            continue
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if m and not fenced:
            base = slug(m.group(1))
            out.add(base if not seen[base] else f"{base}-{seen[base]}")
            seen[base] += 1
    out |= set(re.findall(r"<a\s+(?:name|id)=\"([^\"]+)\"", path.read_text()))
    return out


def broken_links(page: Path) -> list[str]:
    problems = []
    for n, line in prose_lines(page.read_text()):
        for target in LINK.findall(line):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):  # http:, https:, mailto:
                continue
            path_part, _, anchor = target.partition("#")
            dest = (page.parent / path_part).resolve() if path_part else page
            where = f"{page.relative_to(ROOT)}:{n}: {target}"
            if not dest.exists():
                problems.append(f"{where} (no such file)")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                problems.append(f"{where} (no heading #{anchor} in {dest.relative_to(ROOT)})")
    return problems


def test_the_checker_reads_links_and_headings(tmp_path):
    (tmp_path / "b.md").write_text("# B page\n\n## Check a run: the `ship_rule`\n\n## Twice\n\n## Twice\n")
    page = tmp_path / "a.md"
    page.write_text("[ok](b.md#check-a-run-the-ship_rule) [ok](b.md#twice-1) [web](https://x.org/y)\n"
                    "[gone](c.md) [bad](b.md#nope) `[in code](c.md)`\n```\n[fenced](c.md)\n```\n")
    global ROOT
    root, ROOT = ROOT, tmp_path
    try:
        assert broken_links(page) == ["a.md:2: c.md (no such file)", "a.md:2: b.md#nope (no heading #nope in b.md)"]
    finally:
        ROOT = root


@pytest.mark.parametrize("page", pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page):
    problems = broken_links(page)
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("page,limit", sorted(LIMITS.items()))
def test_the_task_pages_stay_short(page, limit):
    lines = len((ROOT / page).read_text().splitlines())
    assert lines <= limit, f"{page} has {lines} lines (at most {limit}: move findings to benchmarks/reports/)"
