#!/usr/bin/env bash
# A file cut into byte ranges, each in a folder of its own (a device call carries folders of at most
# 64 MiB with the working tree), and joined again on the other side:
#   bash benchmarks/gpu/pieces.sh cut FILE DEST NAME PIECE   # DEST/NAME1/NAME.part1, NAME2/NAME.part2, ... (PIECE bytes, a multiple of 1,000,000)
#   bash benchmarks/gpu/pieces.sh join CARRY NAME            # the pieces CARRY/NAME1, NAME2, ... in order, to stdout
#   bash benchmarks/gpu/pieces.sh pack ROOT DEST NAME PIECE DIR...   # the folders ROOT/DIR... as one tar, cut
#   bash benchmarks/gpu/pieces.sh unpack CARRY NAME TARGET           # joined and unpacked into TARGET
set -euo pipefail
case "${1:-}" in
cut)
    FILE=$2; DEST=$3; NAME=$4; PIECE=$5
    [ $((PIECE % 1000000)) -eq 0 ] || { echo "PIECE must be a multiple of 1,000,000 bytes" >&2; exit 2; }
    MB=$((PIECE / 1000000)); SIZE=$(stat -c %s "$FILE"); N=$(((SIZE + PIECE - 1) / PIECE))
    for i in $(seq 1 "$N"); do
        mkdir -p "$DEST/$NAME$i"
        dd if="$FILE" of="$DEST/$NAME$i/$NAME.part$i" bs=1000000 skip=$(((i - 1) * MB)) count="$MB" status=none
    done
    bash "$0" join "$DEST" "$NAME" | cmp -s - "$FILE" || { echo "the pieces of $FILE do not join to it" >&2; exit 1; }
    echo "$N" ;;
join)
    CARRY=$2; NAME=$3
    N=$(find "$CARRY" -maxdepth 1 -type d -regex ".*/$NAME[0-9]+" | wc -l)
    [ "$N" -gt 0 ] || { echo "no pieces $CARRY/${NAME}1..." >&2; exit 1; }
    for i in $(seq 1 "$N"); do
        [ -f "$CARRY/$NAME$i/$NAME.part$i" ] || { echo "piece $CARRY/$NAME$i/$NAME.part$i is missing" >&2; exit 1; }
        cat "$CARRY/$NAME$i/$NAME.part$i"
    done ;;
pack)
    ROOT=$2; DEST=$3; NAME=$4; PIECE=$5; shift 5
    TAR=$(mktemp)
    tar -C "$ROOT" --exclude=__pycache__ -cf "$TAR" "$@"
    bash "$0" cut "$TAR" "$DEST" "$NAME" "$PIECE" || { rm -f "$TAR"; exit 1; }
    rm -f "$TAR" ;;
unpack)
    mkdir -p "$4"
    bash "$0" join "$2" "$3" | tar -C "$4" -xf - ;;
*)
    echo "usage: pieces.sh cut FILE DEST NAME PIECE | join CARRY NAME | pack ROOT DEST NAME PIECE DIR... | unpack CARRY NAME TARGET" >&2
    exit 2 ;;
esac
