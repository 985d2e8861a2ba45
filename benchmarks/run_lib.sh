# Sourced by benchmarks/long_run.sh and benchmarks/base_model_run.sh after they set ROOT: the
# paths a training run reads and writes, the arguments every run shares, and the two steps every
# run ends with.
PY="${PYTHON:-$ROOT/.venv/bin/python}"
ALIGNIR="$ROOT/.venv/bin/alignir"
RUNS="${RUNS:-$ROOT/../runs}"
export ALIGNIR_MODELS="${ALIGNIR_MODELS:-$ROOT/../models}"
SHARED="${ALIGNIR_SHARED:-$ROOT/../shared}"
KEEP="$ROOT/benchmarks/results/adapters"
TEACHER_CACHE="$ROOT/benchmarks/cache/teacher-embeddinggemma-512"
# what every training run here shares: batch, length, checkpoints, held-out pairs, seed, the teacher
TRAIN_SHARED=(--negatives 1 --batch-size 8 --max-length 128 --save-every 25 --eval-examples 64 --eval-every 100
              --threads 2 --seed 1
              --set teacher=embeddinggemma-300m --set teacher_max_length=512 --set "teacher_cache=$TEACHER_CACHE")

keep_run() {  # $1: run name; packages RUNS/NAME (finished) into KEEP/NAME with its logs
    local run="$RUNS/$1"
    [ -f "$run/alignir_train.json" ] && [ -f "$run/adapter_model.safetensors" ] || { echo "$run has not finished" >&2; exit 1; }
    "$PY" scripts/package_adapter.py "$run" "$1" --dest "$KEEP/$1"
    cp "$run/loss_log.jsonl" "$run/eval_log.jsonl" "$KEEP/$1/"
}

score_run() {  # $1: run name, then the collections; scores KEEP/NAME, recorded in gpu_train.json
    local name="$1" sets=() d
    shift
    for d in "$@"; do sets+=(--score "$SHARED/datasets/$d"); done
    "$PY" -m benchmarks.gpu_train --out "$RUNS/score-$name" --work "$RUNS/score-work" --device cpu "${sets[@]}" \
        --score-adapter "trained=$KEEP/$name" --record "$name" --kept-adapter "benchmarks/results/adapters/$name"
}
