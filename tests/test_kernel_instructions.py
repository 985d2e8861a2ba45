"""The callgrind counting of benchmarks/speed/bench_kernel_instructions.py, on a real valgrind run."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.speed.bench_kernel_instructions import _dumps, build_toggle

pytestmark = [
    pytest.mark.skipif(
        not (shutil.which("valgrind") and shutil.which("gcc") and Path("/usr/include/valgrind/callgrind.h").exists()),
        reason="needs valgrind (with its headers) and gcc",
    ),
    pytest.mark.e2e,  # gcc and valgrind in child processes: end to end (scripts/test.sh --fast leaves it out)
]

_PROGRAM = """
import ctypes, sys
toggle = ctypes.CDLL(sys.argv[1])
for label, n in (("small", 20_000), ("big", 200_000)):
    toggle.cg_on()
    total = sum(i * i for i in range(n))
    toggle.cg_off(label.encode())
"""


def test_each_labelled_region_is_counted_alone(tmp_path):
    lib = build_toggle(tmp_path)
    prefix = str(tmp_path / "cg")
    subprocess.run(["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={prefix}",
                    sys.executable, "-c", _PROGRAM, str(lib)], check=True, capture_output=True)
    counts = _dumps(prefix)
    assert set(counts) >= {"small", "big"}
    # ten times the loop: about ten times the instructions (the toggles' own cost is tiny)
    assert counts["small"] > 20_000
    assert 8 < counts["big"] / counts["small"] < 12
