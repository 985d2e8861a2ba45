#!/usr/bin/env bash
# Set up (scripts/setup.sh), lint (ruff) and run the test suite. Slow tests (whole collections with a
# real model) are excluded; run them with: .venv/bin/python -m pytest -m slow
# pytest's exit code 5 ("no tests collected") is turned into a failure.
set -uo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh || exit 1
# lint first (ruff config in pyproject.toml): a finding fails the run
.venv/bin/ruff check . || exit 1
.venv/bin/python -m pytest -q -m "not slow" "$@"
rc=$?
if [ "$rc" -eq 5 ]; then
  echo "pytest collected no tests: failing" >&2
  exit 1
fi
exit "$rc"
