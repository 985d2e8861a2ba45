"""``import alignir`` makes OpenMP's waiting threads sleep (OMP_WAIT_POLICY=PASSIVE) unless the
user chose a policy: spinning waiters stall a CPU forward pass on a machine busier than its cores
(benchmarks/omp_wait_policy.py)."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

PROBE = "import os, alignir; print(os.environ.get('OMP_WAIT_POLICY'))"


def _policy_after_import(env_value: str | None) -> str:
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    if env_value is not None:
        env["OMP_WAIT_POLICY"] = env_value
    out = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, check=True)
    return out.stdout.strip()


def test_import_sets_the_passive_wait_policy():
    assert _policy_after_import(None) == "PASSIVE"


@pytest.mark.parametrize("chosen", ["ACTIVE", "passive"])
def test_a_policy_the_user_chose_is_kept(chosen):
    assert _policy_after_import(chosen) == chosen


def test_the_command_line_gets_it_too():
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    probe = "import os, alignir.retrieval.cli; print(os.environ.get('OMP_WAIT_POLICY'))"
    out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "PASSIVE"
