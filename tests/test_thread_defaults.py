"""``import alignir`` bounds how long OpenMP's waiting threads spin (GOMP_SPINCOUNT=10000) unless
the user chose a wait policy or a spin count: threads that spin for long stall a CPU forward pass
on a machine busier than its cores (benchmarks/archive/omp_wait_policy.py)."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.e2e  # each test imports alignir in a child Python process

PROBE = "import os, {module}; print(os.environ.get('OMP_WAIT_POLICY'), os.environ.get('GOMP_SPINCOUNT'))"


def _after_import(set_vars: dict[str, str], module: str = "alignir") -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    env.update(set_vars)
    out = subprocess.run([sys.executable, "-c", PROBE.format(module=module)], env=env, capture_output=True,
                         text=True, check=True)
    return out.stdout.strip()


def test_import_bounds_the_spin_of_waiting_threads():
    assert _after_import({}) == "None 10000"


@pytest.mark.parametrize("chosen, seen", [({"GOMP_SPINCOUNT": "300000"}, "None 300000"),
                                          ({"OMP_WAIT_POLICY": "ACTIVE"}, "ACTIVE None"),
                                          ({"OMP_WAIT_POLICY": "passive"}, "passive None")])
def test_what_the_user_chose_is_kept(chosen, seen):
    assert _after_import(chosen) == seen


def test_the_command_line_gets_it_too():
    assert _after_import({}, module="alignir.retrieval.cli") == "None 10000"
