"""The inference side of encoders/ on awkward input: trained embedders given one string, empty
texts or lone surrogates, fingerprints that carry the dtype, adapters on another base model, the
instruction an adapter was trained with."""
from __future__ import annotations

import copy
import dataclasses

import numpy as np
import pytest
import torch

from alignir.encoders.cache import EmbeddingCache
from alignir.encoders.embedders import get_embedder
from alignir.encoders.embedders.autoregembed import AutoRegEmbedEmbedder
from alignir.encoders.embedders.gircse import GircseEmbedder
from alignir.encoders.embedders.llm2comp import LLM2CompEmbedder
from alignir.encoders.models import wrap_model

from conftest import TINY_CORPUS

pytestmark = pytest.mark.usefixtures("one_thread")

TRAINED = [AutoRegEmbedEmbedder, LLM2CompEmbedder, GircseEmbedder]


@pytest.mark.parametrize("cls", TRAINED)
def test_trained_single_string_is_rejected(cls, tiny_model):
    """A lone str used to be split into its characters: 5 vectors for "hello"."""
    emb = cls(tiny_model)
    with pytest.raises(ValueError, match="not a single string"):
        emb.encode_queries("hello")
    with pytest.raises(ValueError, match="not a single string"):
        emb.encode_documents("hello")


@pytest.mark.parametrize("cls", TRAINED)
def test_trained_empty_texts_get_zero_vectors_whatever_the_batching(cls, tiny_model):
    """An empty text used to crash ("all sequences are empty") when its batch held only empty
    texts (GIRCSE, LLM2Comp on a tokenizer without BOS), so the outcome depended on batch_size."""
    texts = [TINY_CORPUS[0], "", " \n ", TINY_CORPUS[1]]
    ref = cls(tiny_model, batch_size=8).encode_documents(TINY_CORPUS[:2])
    for bs in (1, 2, 8):
        got = cls(tiny_model, batch_size=bs).encode_documents(texts)
        np.testing.assert_array_equal(got[1:3], 0.0)
        np.testing.assert_allclose(got[[0, 3]], ref, atol=1e-5)
    assert not cls(tiny_model).encode_queries([""]).any()


@pytest.mark.parametrize("cls", TRAINED)
def test_trained_lone_surrogate_is_replaced_not_a_type_error(cls, tiny_model):
    """As in the prompt families, a lone surrogate becomes U+FFFD (was a tokenizer TypeError)."""
    emb = cls(tiny_model)
    got = emb.encode_documents(["x\udcff"])
    np.testing.assert_allclose(got, emb.encode_documents(["x\ufffd"]), atol=1e-6)
    assert [a.tolist() for a in emb.surface_token_ids(["x\udcff"])] == \
           [a.tolist() for a in emb.surface_token_ids(["x\ufffd"])]


@pytest.mark.parametrize("name", ["gircse", "llm2comp", "autoregembed"])
def test_trained_fingerprint_has_the_dtype(name, tiny_model, tmp_path):
    """bf16 vectors differ from fp32 ones, so they must not share a cache key (a bf16 encode
    used to be served the cached fp32 vectors)."""
    bf16 = wrap_model("tiny-llama", tiny_model.tokenizer, copy.deepcopy(tiny_model.model).to(torch.bfloat16),
                      dict(tiny_model.identity), "cpu")
    a, b = get_embedder(name, tiny_model), get_embedder(name, bf16)
    assert np.abs(a.encode_documents(TINY_CORPUS) - b.encode_documents(TINY_CORPUS)).max() > 1e-3
    assert a.fingerprint() != b.fingerprint()
    assert "dtype" not in a.fingerprint()  # fp32 fingerprints (caches, indexes) unchanged
    cache = EmbeddingCache(tmp_path)
    cache.encode_cached(a, TINY_CORPUS, "document", progress=False)
    got = cache.encode_cached(b, TINY_CORPUS, "document", progress=False)
    assert cache.last_stats["n_encoded"] == len(TINY_CORPUS)
    np.testing.assert_array_equal(got, b.encode_documents(TINY_CORPUS))


def _lora(model, folder, base_identity):
    from alignir.encoders.train.adapter import add_lora, save_adapter

    torch.manual_seed(1)
    pm = add_lora(copy.deepcopy(model), r=4, alpha=8)
    return str(save_adapter(pm, folder, None, {"method": "infonce", "hp": {}, "base_model": base_identity}))


def test_adapter_on_another_base_model_is_an_error_or_a_warning(tiny_model, tmp_path, caplog):
    """An adapter records the identity of the model it was trained on: a base model of another
    shape is an error; other weight files of the same shape (another model, or the same weights
    in another format, which cannot be told apart by hash) are a warning."""
    ident = {**tiny_model.identity, "sha256": "a" * 64}
    base = wrap_model("tiny-llama", tiny_model.tokenizer, tiny_model.model, ident, "cpu")
    adapter = _lora(tiny_model.model, tmp_path / "lora", dict(base.identity))
    with caplog.at_level("WARNING"):
        get_embedder("infonce", base, adapter=adapter, progress=False)  # its own base: fine
        GircseEmbedder(base, adapter=adapter)
    assert "trained on" not in caplog.text
    other = wrap_model("tiny-llama", tiny_model.tokenizer, tiny_model.model, {**ident, "sha256": "b" * 64}, "cpu")
    with caplog.at_level("WARNING"):
        GircseEmbedder(other, adapter=adapter)
    assert "vectors are meaningless" in caplog.text and "aaaaaaaaaaaa" in caplog.text
    bigger = dataclasses.replace(base, identity={**base.identity, "vocab": 999})
    with pytest.raises(ValueError, match="trained on another base model"):
        LLM2CompEmbedder(bigger, adapter=adapter)
    # an adapter without a recorded base model (older or hand-made) still loads
    bare = _lora(tiny_model.model, tmp_path / "bare", None)
    GircseEmbedder(other, adapter=bare)


def test_infonce_adapter_queries_get_the_instruction_it_was_trained_with(tiny_model, tmp_path):
    """``alignir train infonce --set instruction=scifact`` trains queries with that instruction; the
    embedder reading its adapter must put it in front of queries too (as the trained families do)."""
    from alignir.encoders.templates import resolve_instruction
    from alignir.encoders.train.adapter import add_lora, save_adapter

    torch.manual_seed(1)
    pm = add_lora(copy.deepcopy(tiny_model.model), r=4, alpha=8)
    meta = {"method": "infonce", "hp": {"instruction": "scifact"}, "embedder_options": {"instruction": "scifact"},
            "base_model": dict(tiny_model.identity)}
    adapter = str(save_adapter(pm, tmp_path / "lora", None, meta))
    default = get_embedder("infonce", tiny_model, adapter=adapter, progress=False)
    assert default.instructions["query"] == resolve_instruction("scifact") != resolve_instruction(None)
    explicit = get_embedder("infonce", tiny_model, adapter=adapter, instruction="scifact", progress=False)
    np.testing.assert_array_equal(default.encode_queries(TINY_CORPUS[:2]), explicit.encode_queries(TINY_CORPUS[:2]))
    other = get_embedder("infonce", tiny_model, adapter=adapter, instruction="Find the answer.", progress=False)
    assert other.instructions["query"] == "Find the answer."
    assert default.instructions["document"] == resolve_instruction(None)  # documents get none, as in training
