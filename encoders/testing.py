"""The seeded tiny model of the test suite, importable from an installed package (like numpy.testing).

A byte-level BPE tokenizer trained in-process on :data:`TINY_CORPUS` and a randomly initialised
2-layer LlamaForCausalLM (d=32) around it, wrapped as a ``LoadedModel``. Seeded: every call gives
the same vocabulary and the same weights. The tests (tests/conftest.py) and the benchmarks that
need a model without downloading one build it here.
"""
from __future__ import annotations

from typing import Any

#: The sentences the tokenizer is trained on (and the tests' small corpus).
TINY_CORPUS = [
    "Photosynthesis converts light, water and carbon dioxide into glucose and oxygen in plants.",
    "The stock market fell sharply after the central bank raised interest rates.",
    "Aerodynamic heating of a flat plate in supersonic flow was measured in a wind tunnel.",
    "Retrieval systems rank documents by their relevance to a user's query.",
    "Proteins fold into three-dimensional structures determined by their amino acid sequence.",
    "The quick brown fox jumps over the lazy dog. 0123456789 !?,.;:'\"()[]{}",
]

#: The model names of :func:`tiny_model` without and with BOS.
TINY_NAMES = {False: "tiny-llama", True: "tiny-llama-bos"}


def train_tokenizer(bos: bool) -> Any:
    """A fast tokenizer (with offsets) trained on TINY_CORPUS: vocabulary 400, pads right and adds
    no BOS; ``bos=True`` pads left and adds BOS, like Gemma."""
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


def tiny_loaded(tok: Any, name: str) -> Any:
    """A randomly initialised 2-layer Llama (d=32, seed 0) around ``tok``, as a CPU LoadedModel named ``name``."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from alignir.encoders.models import wrap_model

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


def tiny_model(bos: bool = False) -> Any:
    """The test suite's ``tiny_model`` (``bos=True``: ``tiny_model_bos``), built afresh."""
    return tiny_loaded(train_tokenizer(bos), TINY_NAMES[bos])
