#!/usr/bin/env bash
# Does a larger base model pay for its cost? The same recipe from each untrained base model:
# SciFact's supervised train pairs with one BM25 negative, the EmbeddingGemma-300M teacher (its
# vectors read from the cache of benchmarks/training/long_run.sh), STEPS optimizer steps of batch 8 x 128
# tokens, lr 1e-4 (the from-base rate of the shipped adapters), DTYPE (fp32; bf16 only pays on a CPU
# with avx512_bf16 or AMX, and both models must share it), seed 1, 64 pairs held out.
# The held-out split is drawn from the data by the seed, so both models are judged on the same pairs.
#
#   bash benchmarks/training/base_model_run.sh train gemma3-270m    # resumes its checkpoint when re-run
#   bash benchmarks/training/base_model_run.sh train smollm2-135m
#   bash benchmarks/training/base_model_run.sh score gemma3-270m    # the five collections, recorded in gpu_train.json
#   BATCH=32 GC=16 STEPS=30 bash benchmarks/training/base_model_run.sh gradcache smollm2-135m
#       # the same recipe at batch BATCH through gradient caching (sub-batches of GC texts): run
#       # base-MODEL-STEPS-bBATCH; its held-out loss is taken in chunks of 8 like the batch-8 runs'
#       # (score it with RUN=base-MODEL-STEPS-bBATCH ... score MODEL)
#
# A finished run keeps its fp16 adapter and logs in benchmarks/results/adapters/base-MODEL-STEPS/.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$ROOT"
source benchmarks/training/run_lib.sh  # PY, ALIGNIR, RUNS, SHARED, KEEP, TRAIN_SHARED, keep_run, score_run
export HF_HUB_OFFLINE=1
STEPS="${STEPS:-400}"
DISTILL="${DISTILL:-4.0}"
DTYPE="${DTYPE:-fp32}"

model="${2:?usage: base_model_run.sh train|score MODEL}"
name="${RUN:-base-$model-$STEPS}"
train_recipe() {  # the recipe from MODEL's base into RUNS/NAME; "$@": options that override TRAIN_SHARED's
    "$ALIGNIR" train infonce --model "$model" --data "$SHARED/datasets/scifact" "${TRAIN_SHARED[@]}" \
        --lr 1e-4 --steps "$STEPS" --dtype "$DTYPE" --set "distill=$DISTILL" --out "$RUNS/$name" "$@"
}
case "${1:-}" in
train)
    train_recipe
    keep_run "$name"
    ;;
gradcache)
    name="base-$model-$STEPS-b${BATCH:-32}"
    unpark_run "$name"
    train_recipe --batch-size "${BATCH:-32}" --set "grad_cache=${GC:-16}" --eval-batch-size 8 --eval-every 25
    keep_or_park "$name"
    ;;
score)
    score_run "$name" ${SETS:-scifact med cisi cran adi}
    ;;
*)
    sed -n '2,16p' "$0"
    exit 2
    ;;
esac
