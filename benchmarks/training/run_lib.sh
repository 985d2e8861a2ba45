# Sourced by benchmarks/training/long_run.sh and benchmarks/training/base_model_run.sh after they set ROOT: the
# paths a training run reads and writes, the arguments every run shares, and the two steps every
# run ends with.
PY="${PYTHON:-$ROOT/.venv/bin/python}"
ALIGNIR="$ROOT/.venv/bin/alignir"
RUNS="${RUNS:-$ROOT/../runs}"
export ALIGNIR_MODELS="${ALIGNIR_MODELS:-$ROOT/../models}"
SHARED="${ALIGNIR_SHARED:-$ROOT/../shared}"
KEEP="${KEEP:-$ROOT/benchmarks/results/adapters}"
TEACHER_CACHE="$ROOT/benchmarks/cache/teacher-embeddinggemma-512"
# a run in flight parked in the repository (its last checkpoint and logs), so that a machine that
# starts bare resumes it exactly instead of starting over: park_run / unpark_run
PARKED="${PARKED:-$ROOT/benchmarks/cache/in-flight}"
TRAIN_RESULTS="${TRAIN_RESULTS:-$ROOT/benchmarks/results/gpu_train.json}"  # the scored runs (score_run)
# what every training run here shares: batch, length, checkpoints, held-out pairs, seed, the teacher
# (STOP_AT=HH:MM or +MINUTES: pause before a step that would end past it; the step then parks the run.
# It is fixed here once as @UNIX_SECONDS and exported, so that every command a chain starts keeps the
# same deadline, even one that starts after HH:MM has passed. RESUME_CHANGED_DATA=1: a parked run
# resumes although its examples changed, e.g. mined with an older tie order; the run records it)
if [ -n "${STOP_AT:-}" ] && [ "${STOP_AT#@}" = "$STOP_AT" ]; then
    deadline="$("$PY" -c '
import sys
from alignir.retrieval.commands.train import _parse_stop_at
try:
    print(_parse_stop_at(sys.argv[1]))
except Exception as e:
    sys.exit(f"STOP_AT: {e}")' "$STOP_AT")" || exit 2  # a deadline that does not parse stops the step
    export STOP_AT="@$deadline"
fi
TRAIN_SHARED=(--negatives 1 --batch-size 8 --max-length 128 --save-every 25 --eval-examples 64 --eval-every 100
              --threads 2 --seed "${SEED:-1}" ${STOP_AT:+--stop-at "$STOP_AT"} ${RESUME_CHANGED_DATA:+--resume-changed-data}
              --set teacher=embeddinggemma-300m --set teacher_max_length=512 --set "teacher_cache=$TEACHER_CACHE")

kept_weights() {  # $1: a kept run; its adapter weights, restored from their recorded commit when they left the tree
    [ -f "$KEEP/$1/adapter_model.safetensors" ] && return 0
    [ -f "$KEEP/$1/alignir_train.json" ] || { echo "$1 is not kept in $KEEP (train it first)" >&2; exit 1; }
    "$PY" "$ROOT/scripts/kept_adapters.py" restore "$1" && [ -f "$KEEP/$1/adapter_model.safetensors" ] || {
        echo "$1: its weights left the tree and did not come back: python scripts/kept_adapters.py restore $1" \
            "(needs the history: git fetch --unshallow)" >&2; exit 1; }
}

is_kept() {  # $1: a run; true when it was kept (its weights in KEEP, or recorded there after they left the tree)
    [ -f "$KEEP/$1/adapter_model.safetensors" ] || [ -f "$KEEP/$1/alignir_train.json" ]
}

kept_cache() {  # $1: a path under benchmarks/cache; present, or brought back from its recorded commit (or rebuilt
    # by its recorded command where the history lacks it): 0 when it is the recorded file, 2 when it is not recorded
    [ -e "$1" ] && return 0
    "$PY" "$ROOT/scripts/kept_adapters.py" restore-cache "$1"
}

keep_run() {  # $1: run name; packages RUNS/NAME (finished) into KEEP/NAME with its logs
    local run="$RUNS/$1"
    [ -f "$run/alignir_train.json" ] && [ -f "$run/adapter_model.safetensors" ] || { echo "$run has not finished" >&2; exit 1; }
    "$PY" scripts/package_adapter.py "$run" "$1" --dest "$KEEP/$1"
    cp "$run/loss_log.jsonl" "$KEEP/$1/"
    if [ -f "$run/eval_log.jsonl" ]; then cp "$run/eval_log.jsonl" "$KEEP/$1/"; fi  # a run without held-out pairs has none
    unpark_done "$1"
}

score_run() {  # $1: run name, then the collections; scores KEEP/NAME, recorded in gpu_train.json and the pages
    local name="$1" sets=() d
    shift
    kept_weights "$name"
    for d in "$@"; do sets+=(--score "$SHARED/datasets/$d"); done
    "$PY" -m benchmarks.gpu.gpu_train --out "$RUNS/score-$name" --work "$RUNS/score-work" --device cpu "${sets[@]}" \
        --score-adapter "trained=$KEEP/$name" --record "$name" --kept-adapter "benchmarks/results/adapters/$name"
    "$PY" scripts/gen_results.py  # the results pages follow the record they print (CI checks they agree)
}

park_run() {  # $1: run name; copies RUNS/NAME's last checkpoint and its logs into PARKED/NAME (commit it)
    local run="$RUNS/$1" dest="$PARKED/$1"
    [ -f "$run/checkpoint/trainer_state.json" ] || { echo "$run has no checkpoint to park" >&2; exit 1; }
    rm -rf "$dest.tmp"
    copy_run_state "$run" "$dest.tmp"
    rm -rf "$dest"
    mv "$dest.tmp" "$dest"
    echo "parked $1 at step $(checkpoint_step "$dest/checkpoint") in $dest"
}

copy_run_state() {  # $1 -> $2: a run's checkpoint folder (replaced) and its loss and held-out logs
    local f
    mkdir -p "$2"
    rm -rf "$2/checkpoint"
    cp -r "$1/checkpoint" "$2/checkpoint"
    for f in loss_log.jsonl eval_log.jsonl; do
        if [ -f "$1/$f" ]; then cp "$1/$f" "$2/"; fi
    done
}

checkpoint_step() {  # $1: a checkpoint folder; its step (0 when there is none)
    [ -f "$1/trainer_state.json" ] || { echo 0; return; }
    "$PY" -c 'import json, sys; print(int(json.load(open(sys.argv[1]))["step"]))' "$1/trainer_state.json"
}

unpark_run() {  # $1: run name; restores PARKED/NAME into RUNS/NAME when it is ahead of RUNS/NAME's own checkpoint
    local run="$RUNS/$1" parked="$PARKED/$1"
    [ -d "$parked/checkpoint" ] || return 0
    if [ "$(checkpoint_step "$parked/checkpoint")" -gt "$(checkpoint_step "$run/checkpoint")" ]; then
        copy_run_state "$parked" "$run"
        echo "resuming $1 from its parked checkpoint (step $(checkpoint_step "$run/checkpoint"))"
    fi
}

unscored() {  # $1: a run, $2: a collection; true while gpu_train.json holds no score of the run there
    "$PY" -c '
import json, sys
runs = json.load(open(sys.argv[1])).get("runs", {})
sys.exit(sys.argv[3] in runs.get(sys.argv[2], {}).get("scores", {}).get("trained", {}))' \
        "$TRAIN_RESULTS" "$1" "$2"
}

unpack_corpus() {  # $1: a kept corpus (corpus.jsonl.gz + SOURCE.json), $2: its folder; unpacked unless $2 holds it
    local want
    want="$("$PY" -c 'import json, sys; print(json.load(open(sys.argv[1]))["corpus_sha256"])' "$1/SOURCE.json")"
    if [ -f "$2/corpus.jsonl" ] && [ "$(sha256sum < "$2/corpus.jsonl" | cut -d" " -f1)" = "$want" ]; then return 0; fi
    rm -rf "$2.tmp"
    mkdir -p "$2.tmp"
    gzip -dc "$1/corpus.jsonl.gz" > "$2.tmp/corpus.jsonl"
    [ "$(sha256sum < "$2.tmp/corpus.jsonl" | cut -d" " -f1)" = "$want" ] || { echo "$1: corpus.jsonl.gz is not the corpus its SOURCE.json names" >&2; exit 1; }
    cp "$1/SOURCE.json" "$2.tmp/"
    rm -rf "$2"
    mv "$2.tmp" "$2"
    echo "unpacked $(basename "$2") from $1"
}

past_deadline() {  # true when STOP_AT is set and has passed (the steps that do not pause check it first)
    [ -n "${STOP_AT:-}" ] && "$PY" -c 'import sys, time; sys.exit(time.time() < float(sys.argv[1]))' "${STOP_AT#@}"
}

keep_or_park() {  # $1: run name; a finished run is kept, a paused one (STOP_AT) parked
    if [ -f "$RUNS/$1/alignir_train.json" ] && [ -f "$RUNS/$1/adapter_model.safetensors" ]; then
        keep_run "$1"
    else
        park_run "$1"
    fi
}

unpark_done() {  # $1: run name; a finished and kept run needs its parked checkpoint no more
    if [ -d "$PARKED/$1" ]; then rm -rf "${PARKED:?}/$1"; echo "removed $PARKED/$1 (the run is kept): commit that"; fi
}

# Mining encodes the SciFact corpus with a kept run (47 min here for SmolLM2-135M) and does
# not pause; its embedding cache (EMBED_CACHE, atomic parts of 128 texts) is what a stopped mine
# keeps. park_embeddings copies the cache folders of one adapter into PARKED/embeddings-RUN
# (commit it), unpark_embeddings merges them back on a bare machine: the mine then encodes only
# the texts that are missing.
EMBED_CACHE="${EMBED_CACHE:-$RUNS/score-work/cache}"

park_embeddings() {  # $1: a kept run; its adapter's embedding-cache folders -> PARKED/embeddings-RUN
    "$PY" - "$KEEP/$1" "$EMBED_CACHE" "$PARKED/embeddings-$1" <<'PYEOF'
import json, shutil, sys
from pathlib import Path

from alignir.encoders.embedders.adapters import adapter_hash

adapter, cache, dest = (Path(a) for a in sys.argv[1:])
sha = adapter_hash(adapter)
ours = [d for d in sorted(cache.iterdir()) if (d / "fingerprint.json").is_file()
        and json.loads((d / "fingerprint.json").read_text()).get("adapter_sha256") == sha] if cache.is_dir() else []
if not ours:
    sys.exit(f"{cache} holds no embeddings of {adapter}")
tmp = dest.with_name(dest.name + ".tmp")
shutil.rmtree(tmp, ignore_errors=True)
for d in ours:
    shutil.copytree(d, tmp / d.name)
shutil.rmtree(dest, ignore_errors=True)
tmp.rename(dest)
print(f"parked {sum(1 for _ in dest.rglob('part-*.npz'))} embedding parts of {adapter.name} in {dest}: commit that")
PYEOF
}

unpark_embeddings() {  # $1: a kept run; merges PARKED/embeddings-RUN into EMBED_CACHE (parts never collide)
    [ -d "$PARKED/embeddings-$1" ] || return 0
    mkdir -p "$EMBED_CACHE"
    cp -rn "$PARKED/embeddings-$1/." "$EMBED_CACHE/"
    echo "restored the parked embeddings of $1 into $EMBED_CACHE"
}
