"""The repository talks about the product, not about how it was developed.

Every tracked text file (``git ls-files``: code, comments, tests, scripts, docs, benchmark
results) is searched for references to the project's own work log, which mean nothing to a
reader of the repository. A reference is:

- one of the words *issue*, *round*, *session* or *work period* (any case, optionally plural)
  followed by a number, with an optional ``#`` or a hyphen between them; the word must start a
  word and not be part of a command-line flag, so ``--rounds 2`` (a benchmark option) passes;
- a ``#`` followed by one to four digits that begins a word (after a space, a line start or an
  opening parenthesis), the usual spelling of an issue number; ``#`` inside an identifier
  (passage ids such as ``d3#2``), colours (``"#1f77b4"``) and comments (``# 3 rows``) pass.

"session" without a number (pytest's ``scope="session"``, an HTTP session) and "round" as in
rounding are untouched: only the word-plus-number shapes above are references.
"""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

HISTORY = re.compile(
    r"(?<![\w-])(?:issue|round|session|work[ -]?period)s?[ -]?#?\d+"
    r"|(?:^|(?<=[\s(]))#\d{1,4}\b",
    re.IGNORECASE,
)


def _tracked_text_files() -> list[Path]:
    try:
        out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    files = []
    for name in out.decode().split("\0"):
        path = ROOT / name
        if name and path.is_file():
            data = path.read_bytes()
            if b"\0" not in data[:8192]:
                files.append(path)
    return files


def history_references(text: str) -> list[tuple[int, str]]:
    """(line number, matched text) of every reference to the development history in ``text``."""
    return [(ln, m.group(0)) for ln, line in enumerate(text.splitlines(), start=1) for m in HISTORY.finditer(line)]


# "<n>" stands for a number, so that this file holds no reference itself.
@pytest.mark.parametrize("text, found", [
    ("as issue <n> asks", ["issue <n>"]),
    ("(issue #<n> item 4)", ["issue #<n>"]),
    ("the issue-<n> targets", ["issue-<n>"]),
    ("Until Session <n> this was", ["Session <n>"]),
    ("opt-in since round <n>", ["round <n>"]),
    ("in work period <n>", ["work period <n>"]),
    ("see #<n> item 3", ["#<n>"]),
    ("(#<n>)", ["#<n>"]),
    ("python bench.py --rounds <n> --int8", []),
    ('@pytest.fixture(scope="session")', []),
    ("round(x, <n>) rounds to <n> places", []),
    ("passage d3#<n> [812:1460]", []),
    ('color="#1f77b4"', []),
    ("x = 1  # <n> rows", []),
    ("<n> sessions of <n> rounds", []),
])
def test_the_pattern_finds_references_and_nothing_else(text, found):
    assert [m for _, m in history_references(text.replace("<n>", "17"))] == [f.replace("<n>", "17") for f in found]


# training data kept for later steps (mined pairs): corpus text, not ours, so not our wording
CORPUS_TEXT = ("benchmarks/cache/",)


def test_no_tracked_file_refers_to_the_development_history():
    hits = []
    for path in _tracked_text_files():
        if path.relative_to(ROOT).as_posix().startswith(CORPUS_TEXT):
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        hits += [f"{path.relative_to(ROOT)}:{ln}: {m}" for ln, m in history_references(text)]
    assert not hits, f"{len(hits)} reference(s) to the development history:\n" + "\n".join(hits[:200])
