#!/usr/bin/env bash
# Fetch the Milvus 2.5 C++ engine once: the PyPI milvus-lite 2.5.1 wheel (pip download --no-deps,
# sha256 checked), of which only the `milvus` binary and its lib/ are unpacked into
# ~/.cache/alignir/milvus-engine-2.5.1 (or $ALIGNIR_MILVUS_ENGINE); nothing is installed beside
# milvus-lite 3.x. Idempotent. Linux x86_64 only (elsewhere it says so and exits 0: the tests
# that need the engine skip with that reason). retrieval/milvus_engine.py runs it.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-${ALIGNIR_VENV:-.venv}/bin/python}
case "$(uname -s)-$(uname -m)" in
  Linux-x86_64) ;;
  *) echo "the Milvus 2.5 engine is built for Linux x86_64 only; not fetched"; exit 0 ;;
esac
exec "$PY" -m alignir.retrieval.milvus_engine fetch "$@"
