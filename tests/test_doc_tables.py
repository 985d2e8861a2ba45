"""The headline tables of the task pages are the ones the result files give (scripts/doc_tables.py)."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def tables():
    spec = importlib.util.spec_from_file_location("doc_tables", ROOT / "scripts" / "doc_tables.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_models_page_carries_the_standing_table_as_recorded(tables):
    assert tables.standing() in (ROOT / "docs" / "models.md").read_text(), \
        "docs/models.md: paste the output of `python scripts/doc_tables.py`"


def test_the_standing_table_lists_every_shipped_model_with_the_default_first(tables):
    from alignir.encoders.shipped import DEFAULT_MODEL

    rows = [line for line in tables.standing().splitlines()[2:] if line.startswith("| `")]
    names = [row.split("`")[1] for row in rows]
    assert names[0] == DEFAULT_MODEL and "(default)" in rows[0]
    assert len(names) == len(set(names)) >= 2
    default = rows[0].split(" | ")
    assert all(cell.count("/") == 1 for cell in default[2:7]), "the default has a row on each collection"


def test_recorded_commands_are_shown_with_the_scripts_current_path(tables):
    assert tables.current("python benchmarks/end_to_end.py --docs 300") == "python -m benchmarks.speed.end_to_end --docs 300"
    assert tables.current("python -m benchmarks.goals --record") == "python -m benchmarks.decisions.goals --record"
    assert tables.current("python -m benchmarks.decisions.goals") == "python -m benchmarks.decisions.goals"
    assert tables.current("python benchmarks/no_such_script.py") == "python benchmarks/no_such_script.py"
