"""Batch tokenization straight through the Rust ``tokenizers`` backend of a fast tokenizer.

Tokenizing is the CPU side of encoding, and beside a GPU it is the bottleneck: a GPU forward of a
135M model takes 256-token documents at over 2,000/s while the transformers tokenizer call
prepared about 1,000/s on the same machine (benchmarks/results/gpu_check.json). Most of that call's
time is Python: it turns every token of every text into Python lists and dicts (ids, attention
mask, offsets) holding the GIL, while the encoding itself runs in Rust with the GIL released.
Here the backend's ``Encoding`` objects are returned as they are, so a caller reads only what it
needs (``len(e)``, ``e.ids``, ``e.offsets``), and a pass that needs only lengths or ids skips the
offsets altogether (``encode_batch_fast``).

The backend gets the same settings the transformers call would give it first (no truncation, no
padding, its ``split_special_tokens``), so ids and offsets are the transformers call's; a
tokenizer without a Rust backend goes through the transformers call.
"""
from __future__ import annotations

from typing import Any, Sequence

__all__ = ["TokenRow", "encode_batch"]


class TokenRow:
    """One text's ids and character offsets, for tokenizers without a Rust backend (the same
    attributes the backend's ``Encoding`` has)."""

    __slots__ = ("ids", "offsets")

    def __init__(self, ids: list[int], offsets: list[tuple[int, int]] | None) -> None:
        self.ids = ids
        self.offsets = offsets

    def __len__(self) -> int:
        return len(self.ids)


def _backend(tok: Any) -> Any | None:
    """``tok``'s Rust tokenizer, set as a transformers call would set it, or None."""
    be = getattr(tok, "_tokenizer", None)
    if not getattr(tok, "is_fast", False) or be is None or not hasattr(be, "encode_batch"):
        return None
    try:
        from transformers.tokenization_utils_base import PaddingStrategy, TruncationStrategy

        tok.set_truncation_and_padding(padding_strategy=PaddingStrategy.DO_NOT_PAD,
                                       truncation_strategy=TruncationStrategy.DO_NOT_TRUNCATE, max_length=None,
                                       stride=0, pad_to_multiple_of=None, padding_side=None)
    except (ImportError, TypeError, AttributeError):  # another transformers: take its own call
        return None
    split = bool(getattr(tok, "split_special_tokens", False))
    if getattr(be, "encode_special_tokens", split) != split:
        be.encode_special_tokens = split
    return be


def encode_batch(tok: Any, texts: Sequence[str], *, add_special_tokens: bool, offsets: bool) -> list[Any]:
    """Encodings of ``texts`` (each with ``len()``, ``.ids`` and, when ``offsets``, ``.offsets``:
    the character span of each token), equal to ``tok(texts, add_special_tokens=...,
    return_offsets_mapping=offsets)``'s."""
    texts = list(texts)
    if not texts:
        return []
    be = _backend(tok)
    if be is not None:
        if not offsets and hasattr(be, "encode_batch_fast"):
            return be.encode_batch_fast(texts, add_special_tokens=add_special_tokens)
        return be.encode_batch(texts, add_special_tokens=add_special_tokens)
    enc = tok(texts, add_special_tokens=add_special_tokens, return_offsets_mapping=offsets)
    spans = enc["offset_mapping"] if offsets else [None] * len(texts)
    return [TokenRow(list(ids), sp) for ids, sp in zip(enc["input_ids"], spans)]
