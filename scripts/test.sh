#!/usr/bin/env bash
# Lint (ruff) and run the test suite; sets up .venv first (scripts/setup.sh) unless it is current.
#   bash scripts/test.sh          every test except the slow ones (what .ci/run calls)
#   bash scripts/test.sh --fast   lint + the tests a developer runs between edits (about 2 min on 2 cores):
#                                 no real LLM, no Milvus and nothing end to end (markers model, milvus, e2e;
#                                 e2e: builds through the CLI, child processes, Ray, browsers, memory measures)
# Tests run on every core (pytest-xdist, -n auto --dist loadfile); ALIGNIR_TEST_WORKERS=0 runs them in one process.
# Further arguments go to pytest. The slow tests (whole collections with a real model):
# .venv/bin/python -m pytest -m slow
# .venv is current when its stamp (written by setup.sh) holds the hash of pyproject.toml,
# constraints.txt and setup.sh; any change to them runs setup again.
# pytest's exit code 5 ("no tests collected") is turned into a failure.
set -uo pipefail
cd "$(dirname "$0")/.."
VENV=${ALIGNIR_VENV:-.venv}
markers="not slow"
if [ "${1:-}" = "--fast" ]; then
  markers="not slow and not model and not milvus and not e2e"
  shift
fi
if [ ! -x "$VENV/bin/python" ] || [ "$(cat "$VENV/.setup-stamp" 2>/dev/null)" != "$(bash scripts/setup.sh --stamp)" ]; then
  bash scripts/setup.sh || exit 1
fi
# lint first (ruff config in pyproject.toml): a finding fails the run
"$VENV/bin/ruff" check . || exit 1
# on every core (pytest-xdist; ALIGNIR_TEST_WORKERS=N or 0 to change that), each test file on one
# worker so that module fixtures are built once; the 25 slowest tests are listed at the end, so the
# suite's time stays visible in CI logs
workers=${ALIGNIR_TEST_WORKERS:-auto}
"$VENV/bin/python" -m pytest -q -n "$workers" --dist loadfile --durations=25 -m "$markers" "$@"
rc=$?
if [ "$rc" -eq 5 ]; then
  echo "pytest collected no tests: failing" >&2
  exit 1
fi
exit "$rc"
