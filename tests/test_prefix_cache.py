"""The fixed prompt prefix's KV cache: vectors equal to the full forward's
within float tolerance, on the tiny real (random-init) Llama with both tokenizers (right
padding without BOS, left padding with BOS) and on the real SmolLM2 (marked ``model``)."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import TINY_CORPUS

from alignir.encoders.embedders import get_embedder
from alignir.encoders.prefix_cache import PrefixCache

pytestmark = pytest.mark.usefixtures("one_thread")

#: a text whose first character merges with the template's opening quote in byte-level BPE
#: ('"(' is one pre-token) cannot use the cache; "x" is one token; "" is an empty text
TEXTS = TINY_CORPUS + ["(parenthesis first", "x", "", "retrieval"]


def _pair(model, family, **kw):
    return (get_embedder(family, model, progress=False, **kw),
            get_embedder(family, model, progress=False, prefix_cache=True, **kw))


@pytest.mark.parametrize("family", ["prompteol", "echo", "mean", "weighted-mean"])
@pytest.mark.parametrize("instruction", [None, "scifact"])
@pytest.mark.parametrize("which", ["tiny_model", "tiny_model_bos"])
def test_cached_prefix_equals_full_forward(request, which, family, instruction):
    model = request.getfixturevalue(which)
    full, cached = _pair(model, family, instruction=instruction, max_batch_size=4)
    for role in ("query", "document"):
        want = full._encode(TEXTS, role)
        got = cached._encode(TEXTS, role)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
        assert np.array_equal(got[TEXTS.index("")], np.zeros(full.dim, np.float32))
        prefix = cached._prefix_cache(role)
        ids, pos, empty, _ = cached.prepare(TEXTS, role)
        covered = [i for i in range(len(TEXTS)) if not empty[i] and prefix.covers(ids[i], pos[i])]
        assert cached.last_stats["n_prefix_cached"] == len(covered)
        # the cache is used where the prompt starts with the prefix's tokens: for every text
        # of the corpus whenever the prefix holds more than a BOS
        if prefix.n > 1:
            assert set(range(len(TINY_CORPUS))) <= set(covered)
        # it is not consumed by a call: the second pass gives the same vectors
        np.testing.assert_array_equal(cached._encode(TEXTS, role), got)
    assert cached.fingerprint() == full.fingerprint()


def test_boundary_merge_falls_back_to_the_full_forward(tiny_model):
    full, cached = _pair(tiny_model, "prompteol")
    ids, pos, _, _ = cached.prepare(["(parenthesis first", "plants"], "document")
    with torch.inference_mode():
        prefix = cached._prefix_cache("document")
    assert prefix.n == len(tiny_model.tokenizer('This sentence: "')["input_ids"])
    assert not prefix.covers(ids[0], pos[0]) and prefix.covers(ids[1], pos[1])
    np.testing.assert_allclose(cached.encode_documents(["(parenthesis first", "plants"]),
                               full.encode_documents(["(parenthesis first", "plants"]), rtol=1e-5, atol=1e-5)
    assert cached.last_stats["n_prefix_cached"] == 1


def test_no_prefix_means_no_cache(tiny_model):
    """The raw-text families without an instruction have no fixed prefix (and no BOS here)."""
    full, cached = _pair(tiny_model, "last")
    np.testing.assert_array_equal(cached.encode_queries(TINY_CORPUS), full.encode_queries(TINY_CORPUS))
    assert cached.last_stats["n_prefix_cached"] == 0
    with torch.inference_mode():
        assert PrefixCache(full._backbone, [], torch.device("cpu")).covers([1, 2], [1]) is False


def test_int8_with_the_prefix_cache(tiny_model):
    """int8 quantises each Linear's input with one scale per call, so its vectors depend a
    little on what else runs in that call (other texts, the prefix): close, not equal."""
    full, cached = _pair(tiny_model, "prompteol", precision="int8", instruction="med")
    a, b = cached.encode_queries(TINY_CORPUS), full.encode_queries(TINY_CORPUS)
    assert cached.last_stats["n_prefix_cached"] == len(TINY_CORPUS)
    cos = (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
    assert cos.min() > 0.999


def test_adapter_embedder_uses_its_own_backbone(tiny_model, tmp_path):
    from test_quantize import _random_lora

    adapter = str(_random_lora(tiny_model, tmp_path / "lora"))
    full, cached = _pair(tiny_model, "infonce", adapter=adapter)
    np.testing.assert_allclose(cached.encode_queries(TINY_CORPUS), full.encode_queries(TINY_CORPUS),
                               rtol=1e-5, atol=1e-5)
    assert cached.last_stats["n_prefix_cached"] == len(TINY_CORPUS)


@pytest.mark.model
def test_smollm2_short_queries(smollm2):
    queries = ["what is the role of insulin", "photosynthesis in plants", "supersonic flow heating"]
    full, cached = _pair(smollm2, "prompteol", instruction="med")
    want, got = full.encode_queries(queries), cached.encode_queries(queries)
    assert cached.last_stats["n_prefix_cached"] == len(queries)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * float(np.abs(want).max()))
