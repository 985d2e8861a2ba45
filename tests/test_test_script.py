"""scripts/test.sh: setup is skipped while .venv is current (its stamp matches), and pytest's
"no tests collected" (exit 5) fails the run instead of passing silently."""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_no_tests_collected_fails_and_a_current_venv_is_not_set_up_again():
    stamp = subprocess.run(["bash", "scripts/setup.sh", "--stamp"], cwd=ROOT, capture_output=True, text=True,
                           check=True).stdout.strip()
    venv = ROOT / ".venv"
    if not (venv / ".setup-stamp").is_file() or (venv / ".setup-stamp").read_text().strip() != stamp:
        pytest.skip(".venv was not set up by this scripts/setup.sh: test.sh would run the setup")
    r = subprocess.run(["bash", "scripts/test.sh", "--fast", "tests/test_markers.py", "-k", "no_such_test_name"],
                       cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "pytest collected no tests: failing" in r.stderr
    assert "is set up in" not in r.stdout  # setup.sh's last line: it did not run
