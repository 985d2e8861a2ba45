"""docs/results.md and benchmarks/README.md are generated (scripts/gen_results.py) from the
committed benchmark results and scripts: the committed pages must equal what the script renders,
and the renderer puts every row under the command that wrote it."""
from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "gen_results.py"


@pytest.fixture(scope="module")
def gen():
    spec = importlib.util.spec_from_file_location("gen_results", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.e2e  # scripts/gen_results.py in a child process
def test_the_committed_pages_are_what_the_script_renders():
    r = subprocess.run([sys.executable, str(SCRIPT), "--check"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_every_result_file_has_a_section_and_every_script_an_entry(gen):
    page = gen.render_results()
    for path in sorted((ROOT / "benchmarks" / "results").glob("*.json")):
        assert f"\n## {path.name}\n" in page
    readme = gen.render_bench_readme()
    scripts = [p for p in sorted((ROOT / "benchmarks").glob("*/*.py")) if p.name != "__init__.py"]
    assert len(scripts) > 50 and not list((ROOT / "benchmarks").glob("[!_c]*.py")), "scripts live in purpose folders"
    for path in scripts:
        assert path.parent.name in gen.FOLDERS, path
        assert f"### {path.name}\n" in readme or f"- `{path.name}` (" in readme, path.name



def test_the_summary_links_every_result_file_to_its_full_page(gen):
    """docs/results.md holds the headline tables; each result file's tables are a page of their own,
    each page under the 500 KB a committed file may have."""
    pages = gen.full_pages()
    summary = gen.render_summary()
    assert "| `smollm2-135m-alignir-v4` (default) |" in summary and "## Goals" in summary
    for path in sorted((ROOT / "benchmarks" / "results").glob("*.json")):
        page = gen.FULL / f"{path.stem}.md"
        assert page in pages and pages[page].startswith(f"# {path.name}\n"), path.name
        assert f"](../benchmarks/reports/results/{path.stem}.md)" in summary, path.name
    assert all(len(text.encode()) < 500_000 for text in pages.values())

def test_rows_are_grouped_under_their_commands(gen):
    rows = [{"dataset": "adi", "ndcg@10": 0.41234, "command": "python benchmarks/a.py --x 1"},
            {"dataset": "med", "ndcg@10": 0.6, "command": "python benchmarks/a.py --x 2"},
            {"dataset": "cran", "ndcg@10": None, "params": {"k": 10}, "command": "python benchmarks/a.py --x 1"}]
    lines = gen.section(rows, gen.NO_COMMAND)
    first, second = lines.index("`python benchmarks/a.py --x 1`"), lines.index("`python benchmarks/a.py --x 2`")
    assert lines[first + 2: first + 6] == ["| dataset | ndcg@10 | params.k |", "|---|---|---|",
                                           "| adi | 0.4123 |  |", "| cran |  | 10 |"]
    assert lines[second + 2: second + 5] == ["| dataset | ndcg@10 |", "|---|---|", "| med | 0.6 |"]


def test_a_file_level_command_covers_rows_without_their_own(gen):
    obj = {"command": "python benchmarks/b.py", "note": "a | b", "rows": [{"x": 1}, {"x": 2, "command": "other"}]}
    lines = gen.section(obj, gen.NO_COMMAND)
    assert lines[:5] == ["", "`python benchmarks/b.py`", "", "| field | value |", "|---|---|"]
    assert "| note | a \\| b |" in lines
    assert lines[lines.index("### rows") + 1:] == ["", "`python benchmarks/b.py`", "", "| x |", "|---|", "| 1 |",
                                                   "", "`other`", "", "| x |", "|---|", "| 2 |"]
