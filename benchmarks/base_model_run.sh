#!/usr/bin/env bash
# Does a larger base model pay for its cost? The same recipe from each untrained base model:
# SciFact's supervised train pairs with one BM25 negative, the EmbeddingGemma-300M teacher (its
# vectors read from the cache of benchmarks/long_run.sh), STEPS optimizer steps of batch 8 x 128
# tokens, lr 1e-4 (the from-base rate of the shipped adapters), bf16, seed 1, 64 pairs held out.
# The held-out split is drawn from the data by the seed, so both models are judged on the same pairs.
#
#   bash benchmarks/base_model_run.sh train gemma3-270m    # resumes its checkpoint when re-run
#   bash benchmarks/base_model_run.sh train smollm2-135m
#   bash benchmarks/base_model_run.sh score gemma3-270m    # the five collections, recorded in gpu_train.json
#
# A finished run keeps its fp16 adapter and logs in benchmarks/results/adapters/base-MODEL-STEPS/.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
PY="${PYTHON:-$ROOT/.venv/bin/python}"
ALIGNIR="$ROOT/.venv/bin/alignir"
RUNS="${RUNS:-$ROOT/../runs}"
export ALIGNIR_MODELS="${ALIGNIR_MODELS:-$ROOT/../models}"
export HF_HUB_OFFLINE=1
SHARED="${ALIGNIR_SHARED:-$ROOT/../shared}"
STEPS="${STEPS:-400}"
DISTILL="${DISTILL:-4.0}"
KEEP="$ROOT/benchmarks/results/adapters"

model="${2:?usage: base_model_run.sh train|score MODEL}"
name="base-$model-$STEPS"
case "${1:-}" in
train)
    "$ALIGNIR" train infonce --model "$model" --data "$SHARED/datasets/scifact" --negatives 1 --batch-size 8 \
        --max-length 128 --lr 1e-4 --steps "$STEPS" --save-every 25 --eval-examples 64 --eval-every 100 \
        --threads 2 --dtype bf16 --seed 1 --set teacher=embeddinggemma-300m --set teacher_max_length=512 \
        --set "teacher_cache=$ROOT/benchmarks/cache/teacher-embeddinggemma-512" --set "distill=$DISTILL" \
        --out "$RUNS/$name"
    "$PY" scripts/package_adapter.py "$RUNS/$name" "$name" --dest "$KEEP/$name"
    cp "$RUNS/$name/loss_log.jsonl" "$RUNS/$name/eval_log.jsonl" "$KEEP/$name/"
    ;;
score)
    sets=()
    for d in ${SETS:-scifact med cisi cran adi}; do sets+=(--score "$SHARED/datasets/$d"); done
    "$PY" -m benchmarks.gpu_train --out "$RUNS/score-$name" --work "$RUNS/score-work" --device cpu "${sets[@]}" \
        --score-adapter "trained=$KEEP/$name" --record "$name" --kept-adapter "benchmarks/results/adapters/$name"
    ;;
*)
    sed -n '2,12p' "$0"
    exit 2
    ;;
esac
