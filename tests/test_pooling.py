"""Pooling (“A Text is Worth Several Tokens” eq.3) against hand computation, left and right padding."""
import numpy as np
import pytest
import torch

from alignir.encoders.pooling import POOLINGS, last_token_index, pool, pool_last, pool_mean, pool_weighted_mean
from alignir.errors import InvalidInputError


@pytest.fixture
def hidden():
    g = torch.Generator().manual_seed(1)
    return torch.randn(3, 6, 4, generator=g)


RIGHT = torch.tensor([[1, 1, 1, 0, 0, 0], [1, 1, 1, 1, 1, 1], [1, 0, 0, 0, 0, 0]])
LEFT = torch.tensor([[0, 0, 0, 1, 1, 1], [1, 1, 1, 1, 1, 1], [0, 0, 0, 0, 0, 1]])


def test_last_token_index_both_sides():
    assert last_token_index(RIGHT).tolist() == [2, 5, 0]
    assert last_token_index(LEFT).tolist() == [5, 5, 5]


@pytest.mark.parametrize("mask", [RIGHT, LEFT])
def test_last_matches_hand(hidden, mask):
    got = pool_last(hidden, mask).numpy()
    H = hidden.numpy()
    for r in range(3):
        j = max(np.flatnonzero(mask[r].numpy()))
        np.testing.assert_array_equal(got[r], H[r, j])


@pytest.mark.parametrize("mask", [RIGHT, LEFT])
def test_mean_matches_hand(hidden, mask):
    got = pool_mean(hidden, mask).numpy()
    H = hidden.numpy()
    for r in range(3):
        js = np.flatnonzero(mask[r].numpy())
        np.testing.assert_allclose(got[r], H[r, js].sum(0) / len(js), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("mask", [RIGHT, LEFT])
def test_weighted_mean_matches_hand(hidden, mask):
    """alpha_j = j / sum_j j with j = 1..L over the pooled positions (“A Text is Worth Several Tokens” eq.3)."""
    got = pool_weighted_mean(hidden, mask).numpy()
    H = hidden.numpy()
    for r in range(3):
        js = np.flatnonzero(mask[r].numpy())
        w = np.arange(1, len(js) + 1, dtype=np.float64)
        want = (H[r, js] * (w / w.sum())[:, None]).sum(0)
        np.testing.assert_allclose(got[r], want, rtol=1e-5, atol=1e-6)


def test_pool_mask_restricts_span(hidden):
    attn = torch.ones(3, 6, dtype=torch.long)
    span = torch.zeros(3, 6, dtype=torch.bool)
    span[:, 2:4] = True
    H = hidden.numpy()
    np.testing.assert_allclose(pool("mean", hidden, attn, span).numpy(), H[:, 2:4].mean(1), rtol=1e-6, atol=1e-6)
    want = H[:, 2] * (1 / 3) + H[:, 3] * (2 / 3)
    np.testing.assert_allclose(pool("weighted-mean", hidden, attn, span).numpy(), want, rtol=1e-5, atol=1e-6)
    # last ignores the pool mask: it always reads the last real token
    np.testing.assert_array_equal(pool("last", hidden, attn, span).numpy(), H[:, 5])


def test_half_precision_pools_in_float32(hidden):
    out = pool_mean(hidden.half(), RIGHT)
    assert out.dtype == torch.float32


def test_errors(hidden):
    with pytest.raises(ValueError, match="no selected token in rows \\[1\\]"):
        pool_mean(hidden, torch.tensor([[1] * 6, [0] * 6, [1] * 6]))
    with pytest.raises(ValueError, match="does not match"):
        pool_last(hidden, torch.ones(3, 5))
    with pytest.raises(ValueError, match="batch, seq, dim"):
        pool_last(hidden[0], torch.ones(6, 4))
    with pytest.raises(ValueError, match="unknown pooling"):
        pool("max", hidden, RIGHT)


def test_unvalidated_pooling_equals_validated_and_only_the_check_is_skipped():
    """``validate=False`` (the encode path, whose collate gives every row a token) pools the same
    vectors; only the empty-row check, which on a GPU waits for the GPU, is skipped."""
    torch.manual_seed(0)
    hidden = torch.randn(3, 5, 4)
    attn = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [0, 0, 1, 1, 1]])
    span = torch.tensor([[0, 1, 1, 0, 0], [0, 0, 1, 1, 0], [0, 0, 0, 1, 1]])
    for kind in POOLINGS:
        assert torch.equal(pool(kind, hidden, attn, span, validate=False), pool(kind, hidden, attn, span))
    empty = span.clone()
    empty[1] = 0
    with pytest.raises(InvalidInputError):
        pool("mean", hidden, attn, empty)
