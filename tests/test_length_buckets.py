"""Length-bucketed batches: every prompt once, within the token and row budgets, and no batch
more than ``max_padding`` (5 %) padding, whatever the budget (a GPU's holds hundreds of rows)."""
from __future__ import annotations

import numpy as np
import pytest
from conftest import TINY_CORPUS

from alignir.encoders.embedders import get_embedder
from alignir.encoders.embedders.prompteol import MAX_PADDING

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.mark.parametrize("budget", [(4096, 64), (262_144, 1024), (300, 4)])
@pytest.mark.parametrize("seed", [0, 1])
def test_batches_cover_every_prompt_within_budgets_and_padding(tiny_model, budget, seed):
    emb = get_embedder("prompteol", tiny_model, progress=False, batch_tokens=budget[0], max_batch_size=budget[1])
    lengths = np.random.default_rng(seed).integers(1, 512, size=3000)
    order = np.argsort(-lengths, kind="stable")
    batches = emb._batches(lengths, order)
    assert sorted(np.concatenate(batches).tolist()) == list(range(len(lengths)))
    padded = 0
    for b in batches:
        size = int(lengths[b].max()) * len(b)
        assert len(b) <= budget[1] and (size <= budget[0] or len(b) == 1)
        assert size - int(lengths[b].sum()) <= MAX_PADDING * size
        padded += size
    assert (padded - lengths.sum()) / padded <= MAX_PADDING
    # without the cap a GPU-sized budget pads far more: the cap is what keeps it low
    emb.max_padding = 1.0
    loose = emb._batches(lengths, order)
    loose_padded = sum(int(lengths[b].max()) * len(b) for b in loose)
    if budget[1] >= 1024:
        assert (loose_padded - lengths.sum()) / loose_padded > MAX_PADDING


def test_encode_pads_under_the_cap_with_the_same_vectors(tiny_model):
    texts = TINY_CORPUS + ["x", "retrieval systems", " ".join(TINY_CORPUS)] * 3
    capped = get_embedder("prompteol", tiny_model, progress=False, batch_tokens=100_000, max_batch_size=1000)
    loose = get_embedder("prompteol", tiny_model, progress=False, batch_tokens=100_000, max_batch_size=1000)
    loose.max_padding = 1.0
    a, b = capped.encode_documents(texts), loose.encode_documents(texts)
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
    share = lambda s: 1 - s["n_tokens"] / s["n_padded_tokens"]  # noqa: E731
    assert loose.last_stats["n_batches"] == 1 and share(loose.last_stats) > MAX_PADDING
    assert share(capped.last_stats) <= MAX_PADDING and capped.last_stats["n_batches"] > 1
