"""encoders.fast_tokenize: the Rust backend called directly gives the transformers call's ids and
offsets, whatever state an earlier transformers call left on the backend."""
from __future__ import annotations

import pytest

from alignir.encoders.fast_tokenize import TokenRow, encode_batch

TEXTS = ["Light water reactors and the heat transfer of boiling.", "", "  spaces  around  ",
         "ünïcödé ⁺ superscripts and emoji 🙂 in text", "a " * 300, "an eos token <|endoftext|> inside text"]


def _expected(tok, texts, add_special_tokens):
    enc = tok(texts, add_special_tokens=add_special_tokens, return_offsets_mapping=True)
    return [list(x) for x in enc["input_ids"]], [[tuple(o) for o in x] for x in enc["offset_mapping"]]


def _check_equal(tok):
    for special in (False, True):
        want_ids, want_offs = _expected(tok, TEXTS, special)
        with_offsets = encode_batch(tok, TEXTS, add_special_tokens=special, offsets=True)
        assert [list(e.ids) for e in with_offsets] == want_ids
        assert [[tuple(o) for o in e.offsets] for e in with_offsets] == want_offs
        ids_only = encode_batch(tok, TEXTS, add_special_tokens=special, offsets=False)
        assert [list(e.ids) for e in ids_only] == want_ids
        assert [len(e) for e in ids_only] == [len(x) for x in want_ids]


def test_same_ids_and_offsets_as_the_transformers_call(tiny_tokenizer, tiny_tokenizer_bos):
    _check_equal(tiny_tokenizer)
    _check_equal(tiny_tokenizer_bos)


@pytest.mark.model
def test_same_ids_and_offsets_with_smollm2s_tokenizer(smollm2):
    _check_equal(smollm2.tokenizer)


def test_a_truncation_left_on_the_backend_is_cleared(tiny_tokenizer):
    """A transformers call with truncation leaves it set on the backend; the direct call must
    not inherit it (it would cut every text silently)."""
    full = [len(x) for x in tiny_tokenizer(TEXTS, add_special_tokens=False)["input_ids"]]
    tiny_tokenizer(TEXTS, add_special_tokens=False, truncation=True, max_length=3)
    assert tiny_tokenizer.backend_tokenizer.truncation is not None
    assert [len(e) for e in encode_batch(tiny_tokenizer, TEXTS, add_special_tokens=False, offsets=False)] == full
    assert max(full) > 3


def test_split_special_tokens_follows_the_tokenizer(tiny_tokenizer):
    text = [f"before {tiny_tokenizer.eos_token} after"]
    assert tiny_tokenizer.eos_token
    try:
        for split in (True, False):
            tiny_tokenizer.split_special_tokens = split
            want, _ = _expected(tiny_tokenizer, text, False)
            got = encode_batch(tiny_tokenizer, text, add_special_tokens=False, offsets=False)
            assert [list(e.ids) for e in got] == want
        assert (tiny_tokenizer.eos_token_id in want[0])
    finally:
        tiny_tokenizer.split_special_tokens = False


def test_a_tokenizer_without_a_rust_backend_goes_through_its_own_call(tiny_tokenizer):
    class Plain:  # a slow tokenizer: no Rust backend, only the transformers-style call
        is_fast = False

        def __call__(self, texts, **kw):
            return tiny_tokenizer(texts, **kw)

    got = encode_batch(Plain(), TEXTS, add_special_tokens=True, offsets=True)
    want_ids, want_offs = _expected(tiny_tokenizer, TEXTS, True)
    assert all(isinstance(e, TokenRow) for e in got)
    assert [e.ids for e in got] == want_ids and [[tuple(o) for o in e.offsets] for e in got] == want_offs
    assert encode_batch(Plain(), [], add_special_tokens=True, offsets=True) == []
