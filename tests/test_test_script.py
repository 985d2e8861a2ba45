"""scripts/test.sh: setup is skipped while .venv is current (its stamp matches), pytest's
"no tests collected" (exit 5) fails the run instead of passing silently, and the two lanes'
marker expressions: the full run leaves out only ``slow``, ``--fast`` also ``model``, ``milvus``
and ``e2e``, all of them registered markers."""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_the_lanes_leave_out_registered_markers(pytestconfig):
    script = (ROOT / "scripts" / "test.sh").read_text()
    full, fast = re.findall(r'^\s*markers="([^"]+)"', script, flags=re.M)
    assert full == "not slow"
    assert fast == "not slow and not model and not milvus and not e2e"
    registered = {line.split(":")[0].strip() for line in pytestconfig.getini("markers")}
    assert set(re.findall(r"not (\w+)", fast)) <= registered


@pytest.mark.e2e
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
