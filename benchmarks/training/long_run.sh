#!/usr/bin/env bash
# The long two-stage distillation run of docs/training.md ("A long run"), in steps of at most a
# few hours each on 2 CPU cores, so that the run survives machines that start bare. What a
# later step needs travels in the repository, nothing else does:
#   benchmarks/cache/teacher-embeddinggemma-512/   the teacher's vectors of every training text
#                                                   (computed once; new texts add shards)
#   benchmarks/results/adapters/long-sK/            stage K's trained adapter (fp16) and logs
#   benchmarks/cache/long-mined.jsonl               the pairs of stages 2-4, mined with stage 1
#   benchmarks/results/sweep-distill/distill-W/     each swept weight's logs
#   benchmarks/results/adapters/frames-S-distill-W/ the query-framing pilot's adapter, and its
#   benchmarks/results/adapters/sweep-distill-W/    unframed twin from the sweep (both scored)
#   benchmarks/cache/corpora/NAME/                  the package corpora as first built (gzip), unpacked into
#                                                   CORPORA on a bare machine: the archive moves on, a
#                                                   rebuild can draw other texts and a resume would refuse them
#   benchmarks/cache/in-flight/RUN/                 a run in flight, parked: its last checkpoint and logs
#                                                   (park RUN; the next `base`/`mined` of RUN resumes from it)
#   benchmarks/cache/in-flight/embeddings-RUN/      a stopped mine's embeddings of the SciFact corpus (park-mine RUN)
# The weights of runs no test re-scores, the larger corpora and the mined pairs left git: recorded
# with sha256 and commit (benchmarks/results/adapters/adapter_hashes.json,
# benchmarks/cache/cache_hashes.json, which records the teacher vectors too), a step that reads one
# brings it back first with scripts/kept_adapters.py restore RUN | restore-cache PATH (from history; a
# cache without history is rebuilt by its recorded command, and a rebuild that differs says so).
# EmbeddingGemma and the runs' working folders are rebuilt or kept outside the checkout
# (ALIGNIR_MODELS, RUNS); a step killed on a machine that lives on resumes when re-run.
#
#   bash benchmarks/training/long_run.sh prepare   # corpora + EmbeddingGemma + the stage-1 teacher vectors
#   bash benchmarks/training/long_run.sh stage 1   # 800 steps from v3 (~1 h 40 min here), then keeps the adapter
#   bash benchmarks/training/long_run.sh mine      # negatives mined with stage 1 + their teacher vectors
#                                         # (mine RUN: with the kept run RUN, into benchmarks/cache/mined-RUN.jsonl)
#   bash benchmarks/training/long_run.sh stage 2   # 800 steps from stage 1 on the mined pairs
#   bash benchmarks/training/long_run.sh stage 3   # 800 steps from stage 2 on the same pairs; stage 4 likewise
#   bash benchmarks/training/long_run.sh score long-s1   # the five collections (or SETS), recorded in gpu_train.json
#   bash benchmarks/training/long_run.sh base gemma3-270m  # STEPS (400) steps from the untrained model on the mix,
#                                         # DISTILL 4.0, lr 1e-4, DTYPE fp32: run long-base-MODEL-STEPS
#                                         # (FRAMES=S: with query framing, run long-base-MODEL-STEPS-frames-S)
#   bash benchmarks/training/long_run.sh mined RUN # STEPS (200) steps from the kept run RUN on the mix with the pairs
#                                         # mined with it (mine RUN first), its model, DISTILL 4.0, lr LR (5e-5),
#                                         # DTYPE fp32: run RUN-mined-STEPS
#   3,000 optimizer steps with the negatives refreshed once, half-way (each step resumes if killed):
#     STEPS=1500 bash benchmarks/training/long_run.sh base gemma3-270m              # long-base-gemma3-270m-1500
#     bash benchmarks/training/long_run.sh mine long-base-gemma3-270m-1500
#     STEPS=1500 bash benchmarks/training/long_run.sh mined long-base-gemma3-270m-1500
#   STOP_AT=22:10 STEPS=1500 bash benchmarks/training/long_run.sh base gemma3-270m   # any training step with STOP_AT
#                                         # (HH:MM or +MINUTES) pauses before a step that would end past it and
#                                         # parks the run in benchmarks/cache/in-flight/RUN: commit that
#   STOP_AT=22:10 bash benchmarks/training/long_run.sh budget gemma3-270m   # the three steps above and the scoring
#                                         # as one command: each done step skipped, a paused half parked, no
#                                         # new step (or collection to score) started past STOP_AT (mining
#                                         # does not pause)
#   PAIRS=benchmarks/cache/mined-long-base-gemma3-270m-1500.jsonl bash benchmarks/training/long_run.sh bio \
#       long-base-gemma3-270m-1500-mined-1500   # STEPS (200) more steps with the biomedical ontologies
#                                         # in the mix: run RUN-bio-STEPS (`more`: without them, RUN-more-STEPS)
#   bash benchmarks/training/long_run.sh snapshot NAME  # the package corpus NAME built again into CORPORA and
#                                         # benchmarks/cache/corpora/NAME (what restore-cache runs without history)
#   bash benchmarks/training/long_run.sh teacher   # the teacher vectors of every kept run's mix (prepare's texts,
#                                         # each mined file's, bio and more at seeds 1 and 2) into the teacher cache
#   bash benchmarks/training/long_run.sh park RUN  # the same after a run was stopped by hand (SIGTERM: it checkpoints
#                                         # the step in flight)
#   bash benchmarks/training/long_run.sh park-mine RUN  # after a mine with RUN was stopped by hand: its embeddings so
#                                         # far into benchmarks/cache/in-flight/embeddings-RUN (commit that);
#                                         # the next mine with RUN encodes only the rest
#   bash benchmarks/training/long_run.sh student   # STEPS (200) more steps of the default (v4) on its own data
#                                         # (SciFact pairs + 5,000 title and 5,000 crop pairs, batch BATCH (8),
#                                         # lr 5e-5, DTYPE fp32) taught by the shipped TEACHER
#                                         # (alignir:gemma3-270m-alignir) instead of all-MiniLM-L6-v2: a stronger
#                                         # shipped model distilled into SmolLM2, run student-NAME-STEPS
#   bash benchmarks/training/long_run.sh forms     # STEPS (200) more steps of the default on its own data with its
#                                         # own teacher (all-MiniLM-L6-v2) and FORMS (0.3) of the training
#                                         # queries' pairs read in capitals or lower case without punctuation
#                                         # (--text-forms), batch BATCH (8): run forms-FORMS-STEPS
#                                         # (FORMS=0: the same steps without variants, its control)
#   bash benchmarks/training/long_run.sh sweep     # the distillation weight, 300 steps each on SciFact pairs
#   bash benchmarks/training/long_run.sh frames    # a sweep run with query framing (FRAMES=0.5, DISTILL=1.0), then
#                                         # it and its unframed twin scored on ADI, CISI and Cranfield
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$ROOT"
source benchmarks/training/run_lib.sh  # PY, ALIGNIR, RUNS, SHARED, KEEP, TEACHER_CACHE, TRAIN_SHARED, keep_run, score_run
CORPORA="${CORPORA:-$ROOT/../corpora}"
MINED="$ROOT/benchmarks/cache/long-mined.jsonl"
SWEEP="$ROOT/benchmarks/results/sweep-distill"
BREADTH=(wordnet foldoc freeciv-nations python-docs debian-descriptions manpages)
CORPUS_ARGS=(--corpus "$SHARED/datasets/scifact")
for c in "${BREADTH[@]}"; do CORPUS_ARGS+=(--corpus "$CORPORA/$c"); done
MIX=supervised,title=400,crop=200
# the stages and the sweep start from v3 and differ in data, steps and distill weight
TRAIN_BASE=(--model smollm2-135m --lr 5e-5 --dtype bf16 "${TRAIN_SHARED[@]}")
COMMON=("${TRAIN_BASE[@]}" --data-mix "$MIX" "${CORPUS_ARGS[@]}" --steps 800 --set distill=1.0)
SNAPSHOT="$ROOT/benchmarks/cache/corpora"
mkdir -p "$RUNS"

corpora() {  # every breadth corpus in CORPORA: the repository's snapshot where it has one, else built (then snapshotted)
    local c missing=()
    for c in "${BREADTH[@]}"; do
        if [ ! -f "$SNAPSHOT/$c/corpus.jsonl.gz" ] && [ -f "$SNAPSHOT/$c/SOURCE.json" ]; then  # recorded, out of git
            kept_cache "$SNAPSHOT/$c/corpus.jsonl.gz" || echo "$c: its snapshot is not the recorded one (above)" >&2
        fi
        if [ -f "$SNAPSHOT/$c/corpus.jsonl.gz" ]; then
            unpack_corpus "$SNAPSHOT/$c" "$CORPORA/$c"
        elif [ ! -f "$CORPORA/$c/corpus.jsonl" ]; then
            missing+=(--source "$c")
        fi
    done
    if [ ${#missing[@]} -gt 0 ]; then
        "$PY" scripts/build_corpus.py --out "$CORPORA" "${missing[@]}" --drop-overlapping debian-descriptions
    fi
    for c in "${BREADTH[@]}"; do
        [ -f "$SNAPSHOT/$c/corpus.jsonl.gz" ] && continue
        mkdir -p "$SNAPSHOT/$c"
        gzip -9n -c "$CORPORA/$c/corpus.jsonl" > "$SNAPSHOT/$c/corpus.jsonl.gz"
        cp "$CORPORA/$c/SOURCE.json" "$SNAPSHOT/$c/"
    done
}

teacher_vectors() {  # $1: the pairs data (BEIR folder or mined .jsonl)
    corpora
    kept_cache "$TEACHER_CACHE" || echo "the teacher cache is not the recorded one (above): vectors it lacks are computed" >&2
    "$PY" scripts/precompute_teacher.py --teacher embeddinggemma-300m --cache "$TEACHER_CACHE" --data "$1" \
        --data-mix "$MIX" "${CORPUS_ARGS[@]}" --negatives 1 --seeds "${SEED:-1}" --max-length 512 --threads 2
}

mined_pairs() { echo "$ROOT/benchmarks/cache/mined-$1.jsonl"; }  # $1: the kept run that mined them
base_model() {  # $1: a kept run; the registered name of the model its adapter was trained on
    "$PY" -c 'import json, sys; print(json.load(open(sys.argv[1]))["base_model"]["name"])' "$KEEP/$1/alignir_train.json"
}

case "${1:-}" in
prepare)
    corpora
    bash scripts/fetch_embeddinggemma.sh "$ALIGNIR_MODELS/embeddinggemma-300m"
    teacher_vectors "$SHARED/datasets/scifact"
    ;;
stage)
    k="${2:?usage: long_run.sh stage 1|2|3|4}"
    case "$k" in
    1) start=builtin:smollm2-135m-alignir-v3; data="$SHARED/datasets/scifact" ;;
    2|3|4) start="$KEEP/long-s$((k - 1))"; data="$MINED"
         [ -f "$MINED" ] || { echo "run mine first" >&2; exit 1; }
         kept_weights "long-s$((k - 1))" ;;
    *) echo "stages are 1 to 4" >&2; exit 2 ;;
    esac
    corpora
    unpark_run "long-s$k"
    "$ALIGNIR" train infonce --init-adapter "$start" --data "$data" "${COMMON[@]}" --out "$RUNS/long-s$k"
    keep_or_park "long-s$k"
    ;;
mine)
    # with stage 1 by default; with RUN, any kept run (its base model is read from its adapter)
    from="${2:-long-s1}"; out="$MINED"; [ "$from" = long-s1 ] || out="$(mined_pairs "$from")"
    kept_weights "$from"
    unpark_embeddings "$from"  # what a stopped mine encoded (park-mine)
    "$PY" scripts/mine_negatives.py --model "$(base_model "$from")" --adapter "$KEEP/$from" \
        --data "$SHARED/datasets/scifact" --split train --out "$out" --depth 30 --skip 3 --per-query 1 --threads 2 \
        --cache-dir "$EMBED_CACHE"  # the embedding cache of `score`: one encoding when they match
    teacher_vectors "$out"
    if [ -d "$PARKED/embeddings-$from" ]; then
        rm -rf "${PARKED:?}/embeddings-$from"; echo "removed $PARKED/embeddings-$from (mined): commit that"
    fi
    ;;
mined)
    # a second stage for any kept run: from its adapter, on the mix with its own mined negatives
    from="${2:?usage: long_run.sh mined RUN}"; pairs="$(mined_pairs "$from")"; name="$from-mined-${STEPS:-200}"
    kept_cache "$pairs" || { echo "run: bash benchmarks/training/long_run.sh mine $from" >&2; exit 1; }
    kept_weights "$from"
    corpora
    unpark_run "$name"
    "$ALIGNIR" train infonce --model "$(base_model "$from")" --init-adapter "$KEEP/$from" --data "$pairs" \
        --data-mix "$MIX" "${CORPUS_ARGS[@]}" "${TRAIN_SHARED[@]}" --lr "${LR:-5e-5}" --dtype "${DTYPE:-fp32}" \
        --steps "${STEPS:-200}" --set "distill=${DISTILL:-4.0}" --out "$RUNS/$name"
    keep_or_park "$name"
    ;;
student)
    # the default's own data (run gpu-distill-85 of gpu_train.json) continued from the default with
    # two changes: the teacher, a shipped alignir model (AlignirTeacher) whose dense leg is stronger
    # than the default's, and batch 8 where the default's run had 32 (more than 24 GB here). The
    # teacher's vectors are cached outside the checkout (RUNS/teacher-cache), each computed as the
    # run first draws its text
    teacher="${TEACHER:-alignir:gemma3-270m-alignir}"; steps="${STEPS:-200}"
    name="student-${teacher#alignir:}-$steps"
    unpark_run "$name"
    "$ALIGNIR" train infonce --model smollm2-135m --init-adapter builtin:smollm2-135m-alignir-v4 \
        --data "$SHARED/datasets/scifact" --data-mix supervised,title=5000,crop=5000 --corpus "$SHARED/datasets/scifact" \
        --negatives 1 --steps "$steps" --batch-size "${BATCH:-8}" --max-length 128 --lr 5e-5 --save-every 25 \
        --threads 2 --seed "${SEED:-1}" --dtype "${DTYPE:-fp32}" ${STOP_AT:+--stop-at "$STOP_AT"} \
        --set "teacher=$teacher" --set distill="${DISTILL:-1.0}" --set teacher_max_length="${TEACHER_LENGTH:-128}" \
        --set "teacher_cache=$RUNS/teacher-cache" --out "$RUNS/$name"
    keep_or_park "$name"
    ;;
forms)
    # the default's own data and teacher continued from the default, a share of the pairs in the
    # forms the text-form benchmark measures (encoders.train.text_variants); the teacher is uncased,
    # so it scores a variant as it scores the natural text, and its vectors of the variants are
    # computed as the run first draws them (RUNS/teacher-cache)
    share="${FORMS:-0.3}"; steps="${STEPS:-200}"; name="forms-$share-$steps"
    unpark_run "$name"
    "$ALIGNIR" train infonce --model smollm2-135m --init-adapter builtin:smollm2-135m-alignir-v4 \
        --data "$SHARED/datasets/scifact" --data-mix supervised,title=5000,crop=5000 --corpus "$SHARED/datasets/scifact" \
        --negatives 1 --steps "$steps" --batch-size "${BATCH:-8}" --max-length 128 --lr 5e-5 --save-every 25 \
        --threads 2 --seed "${SEED:-1}" --dtype "${DTYPE:-fp32}" ${STOP_AT:+--stop-at "$STOP_AT"} \
        --text-forms "$share" --set teacher=all-minilm-l6-v2 --set distill=1.0 \
        --set "teacher_cache=$RUNS/teacher-cache" --out "$RUNS/$name"
    keep_or_park "$name"
    ;;
sweep)
    # the distillation weight on SciFact's supervised pairs alone (their teacher vectors are in the
    # stage-1 cache), judged by the held-out InfoNCE of 64 held-out train pairs
    # each weight's logs are kept in the repository as it finishes; a re-run skips the kept weights
    mkdir -p "$SWEEP"
    for w in ${WEIGHTS:-0.25 0.5 1.0 2.0}; do
        if [ -f "$SWEEP/distill-$w/eval_log.jsonl" ]; then echo "distill=$w: kept"; continue; fi
        "$ALIGNIR" train infonce --init-adapter builtin:smollm2-135m-alignir-v3 --data "$SHARED/datasets/scifact" \
            "${TRAIN_BASE[@]}" --steps 300 --set "distill=$w" --out "$RUNS/sweep-distill-$w"
        mkdir -p "$SWEEP/distill-$w"
        cp "$RUNS/sweep-distill-$w/"{loss_log.jsonl,eval_log.jsonl,alignir_train.json} "$SWEEP/distill-$w/"
        echo "distill=$w: $(tail -n 1 "$SWEEP/distill-$w/eval_log.jsonl")"
    done
    ;;
frames)
    # the query-framing pilot: the sweep's recipe at weight DISTILL with FRAMES of the training
    # queries framed, against the sweep's own run at that weight (its checkpoint folder in RUNS)
    w="${DISTILL:-1.0}"; share="${FRAMES:-0.5}"; framed="frames-$share-distill-$w"; twin="sweep-distill-$w"
    [ -f "$RUNS/$twin/adapter_model.safetensors" ] || { echo "run the sweep at $w first (its adapter in $RUNS/$twin)" >&2; exit 1; }
    "$ALIGNIR" train infonce --init-adapter builtin:smollm2-135m-alignir-v3 --data "$SHARED/datasets/scifact" \
        "${TRAIN_BASE[@]}" --steps 300 --set "distill=$w" --query-frames "$share" --out "$RUNS/$framed"
    for run in "$twin" "$framed"; do
        is_kept "$run" || keep_run "$run"
        score_run "$run" ${SETS:-adi cisi cran}
    done
    ;;
base)
    # the mix from an untrained base model (no v3 adapter to start from): the base-model comparison's
    # rate and distillation weight (benchmarks/training/base_model_run.sh), with breadth against its overfitting
    # (FRAMES set: that share of the training queries framed as requests, the run named -frames-S)
    model="${2:?usage: long_run.sh base MODEL}"; name="long-base-$model-${STEPS:-400}${FRAMES:+-frames-$FRAMES}"
    corpora
    unpark_run "$name"
    "$ALIGNIR" train infonce --model "$model" --data "$SHARED/datasets/scifact" --data-mix "$MIX" "${CORPUS_ARGS[@]}" \
        "${TRAIN_SHARED[@]}" --lr 1e-4 --dtype "${DTYPE:-fp32}" --steps "${STEPS:-400}" \
        --set "distill=${DISTILL:-4.0}" ${FRAMES:+--query-frames "$FRAMES"} --out "$RUNS/$name"
    keep_or_park "$name"
    ;;
park)
    park_run "${2:?usage: long_run.sh park RUN}"
    ;;
park-mine)
    park_embeddings "${2:?usage: long_run.sh park-mine RUN}"
    ;;
budget)
    # the 3,000-step budget on MODEL: STEPS=1500 base, ADI scored, mine, STEPS=1500 mined, then the
    # five collections, smallest first (ADI decides the ship rule most often; SciFact's index takes
    # an hour here); each step that is done (kept, mined, scored on a collection) is skipped, so
    # the same command continues on the next machine
    model="${2:?usage: long_run.sh budget MODEL}"; first="long-base-$model-1500"; second="$first-mined-1500"
    for step in "base $model" "score $first adi" "mine $first" "mined $first" "score $second adi cran cisi med scifact"; do
        set -- $step
        case "$1" in
        base|mined) run="$first"; [ "$1" = mined ] && run="$second"
            is_kept "$run" && continue
            past_deadline && { echo "STOP_AT has passed: $run waits for the next call"; exit 0; }
            STEPS=1500 bash "$0" "$1" "$2"
            is_kept "$run" || { echo "$run paused and parked: commit benchmarks/cache"; exit 0; } ;;
        mine) rc=0; kept_cache "$(mined_pairs "$2")" 2>/dev/null || rc=$?
            [ "$rc" = 0 ] && continue
            [ "$rc" = 2 ] || { echo "the pairs mined with $2 are not the recorded ones: restore-cache them" >&2; exit 1; }
            past_deadline && { echo "STOP_AT has passed: mining waits for the next call"; exit 0; }
            bash "$0" mine "$2" ;;
        score) run="$2"; shift 2  # one collection a call, each recorded as it ends
            for d in "$@"; do
                unscored "$run" "$d" || continue
                past_deadline && { echo "STOP_AT has passed: scoring $run on $d waits for the next call"; exit 0; }
                SETS="$d" bash "$0" score "$run"
            done ;;
        esac
    done
    ;;
bio|more)
    # STEPS (200) more steps from the kept run RUN on the mix, on PAIRS (default: the pairs mined with
    # RUN), its model, DISTILL 4.0, lr LR (5e-5), DTYPE fp32; `bio` with the biomedical ontologies as
    # an eighth corpus (diseases, anatomy, cell types: the medical ground no other corpus covers),
    # run RUN-bio-STEPS; `more` without them, its control, run RUN-more-STEPS (SEED=N: another
    # seed, the name ending -seedN). The new texts'
    # teacher vectors are added to the cache first
    from="${2:?usage: long_run.sh bio|more RUN}"; pairs="${PAIRS:-$(mined_pairs "$from")}"; name="$from-$1-${STEPS:-200}${SEED:+-seed$SEED}"
    kept_cache "$pairs" || { echo "no pairs $pairs: mine with $from first, or give PAIRS" >&2; exit 1; }
    kept_weights "$from"
    if [ "$1" = bio ]; then BREADTH+=(biomedical-ontologies); CORPUS_ARGS+=(--corpus "$CORPORA/biomedical-ontologies"); fi
    teacher_vectors "$pairs"
    unpark_run "$name"
    "$ALIGNIR" train infonce --model "$(base_model "$from")" --init-adapter "$KEEP/$from" --data "$pairs" \
        --data-mix "$MIX" "${CORPUS_ARGS[@]}" "${TRAIN_SHARED[@]}" --lr "${LR:-5e-5}" --dtype "${DTYPE:-fp32}" \
        --steps "${STEPS:-200}" --set "distill=${DISTILL:-4.0}" --out "$RUNS/$name"
    keep_or_park "$name"
    ;;
snapshot)
    # one package corpus built again (the archive may have moved on: its sha256 then differs from the record)
    c="${2:?usage: long_run.sh snapshot NAME}"
    "$PY" scripts/build_corpus.py --out "$CORPORA" --source "$c" --drop-overlapping debian-descriptions
    mkdir -p "$SNAPSHOT/$c"
    gzip -9n -c "$CORPORA/$c/corpus.jsonl" > "$SNAPSHOT/$c/corpus.jsonl.gz"
    cp "$CORPORA/$c/SOURCE.json" "$SNAPSHOT/$c/"
    ;;
teacher)
    # the teacher vectors the kept runs read: prepare's, each mined file's, and the bio and more mixes at seeds 1 and 2
    teacher_vectors "$SHARED/datasets/scifact"
    for r in long-base-gemma3-270m-400 long-base-gemma3-270m-1500 long-base-smollm2-135m-1500; do
        kept_cache "$(mined_pairs "$r")"
        teacher_vectors "$(mined_pairs "$r")"
    done
    breadth=("${BREADTH[@]}"); corpus_args=("${CORPUS_ARGS[@]}")
    for s in 1 2; do
        BREADTH=("${breadth[@]}"); CORPUS_ARGS=("${corpus_args[@]}")
        SEED=$s teacher_vectors "$(mined_pairs long-base-gemma3-270m-1500)"  # more
        BREADTH+=(biomedical-ontologies); CORPUS_ARGS+=(--corpus "$CORPORA/biomedical-ontologies")
        SEED=$s teacher_vectors "$(mined_pairs long-base-gemma3-270m-1500)"  # bio
    done
    ;;
score)
    score_run "${2:?usage: long_run.sh score RUN}" ${SETS:-scifact med cisi cran adi}
    ;;
*)
    sed -n '/^set -euo/q;2,$p' "$0"
    exit 2
    ;;
esac
