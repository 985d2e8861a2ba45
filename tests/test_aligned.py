"""encoders.aligned: projection, term folding, eq.15/16 vectors, PC1 (eq.14), explain."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from alignir.encoders.aligned import (
    TermMap,
    adjust,
    doc_vectors,
    doc_vectors_from_topk,
    explain,
    fit_pc1,
    project_topk,
    query_vectors,
    svd_basis,
    token_logits,
)


def _rand(n, V, d, seed=0):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((n, d)).astype(np.float32), rng.standard_normal((V, d)).astype(np.float32)


def _full_topk(H, W, k, mask=()):
    L = H.astype(np.float64) @ W.astype(np.float64).T
    L[:, list(mask)] = -np.inf
    ids = np.argsort(-L, axis=1, kind="stable")[:, :k]
    return ids, np.take_along_axis(L, ids, 1)


# ----------------------------------------------------------------------------- projection


@pytest.mark.parametrize("chunk", [1, 7, 64, 100, 5000])
def test_chunked_projection_equals_full_matmul(chunk):
    H, W = _rand(9, 100, 16)
    mask = [0, 3, 50, 99]
    ids, logits = project_topk(H, torch.from_numpy(W), 12, mask_ids=mask, chunk=chunk)
    ref_ids, ref_logits = _full_topk(H, W, 12, mask)
    assert ids.dtype == np.int32 and logits.dtype == np.float32 and ids.shape == (9, 12)
    np.testing.assert_array_equal(ids, ref_ids)
    np.testing.assert_allclose(logits, ref_logits, rtol=1e-5, atol=1e-5)
    assert not np.isin(ids, mask).any()
    assert (np.diff(logits, axis=1) <= 0).all()


def test_topk_whole_allowed_vocabulary_and_numpy_head():
    H, W = _rand(3, 20, 4, seed=1)
    ids, _ = project_topk(H, W, 18, mask_ids=np.array([5, 6]), chunk=3)
    for row in ids:
        assert sorted(row.tolist()) == [i for i in range(20) if i not in (5, 6)]


def test_ties_broken_by_smaller_id():
    W = np.zeros((10, 2), dtype=np.float32)
    W[[2, 7, 4], 0] = 1.0  # three tokens tie
    ids, logits = project_topk(np.array([[1.0, 0.0]], dtype=np.float32), W, 3, chunk=4)
    assert ids[0].tolist() == [2, 4, 7]
    assert logits[0].tolist() == [1.0, 1.0, 1.0]


def test_projection_bad_input():
    H, W = _rand(2, 10, 4)
    with pytest.raises(ValueError, match="dimension"):
        project_topk(H[:, :3], W, 2)
    with pytest.raises(ValueError, match="k must be"):
        project_topk(H, W, 0)
    with pytest.raises(ValueError, match="k must be"):
        project_topk(H, W, 9, mask_ids=[0, 1])
    H2 = H.copy()
    H2[0, 0] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        project_topk(H2, W, 2)
    with pytest.raises(ValueError, match="mask_ids"):
        project_topk(H, W, 2, mask_ids=[10])


def _tiny_llama(vocab=64, seed=0):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=vocab, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                      num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=64,
                      tie_word_embeddings=True)
    return LlamaForCausalLM(cfg).eval()


def test_projection_matches_the_models_own_next_token_logits():
    """E_g·h with h = last hidden state is exactly what the causal LM decodes (“A Text is Worth Several Tokens” §3.2)."""
    model = _tiny_llama()
    x = torch.tensor([[5, 9, 11, 3, 40], [7, 7, 8, 1, 2]])
    with torch.no_grad():
        out = model(input_ids=x, output_hidden_states=True)
    h = out.hidden_states[-1][:, -1].numpy()
    ids, logits = project_topk(h, model.get_output_embeddings().weight, 10, chunk=16)
    ref_v, ref_i = torch.topk(out.logits[:, -1], 10, dim=1)
    np.testing.assert_array_equal(ids, ref_i.numpy())
    np.testing.assert_allclose(logits, ref_v.numpy(), rtol=1e-4, atol=1e-5)


def test_token_logits_gather():
    H, W = _rand(2, 30, 8)
    got = token_logits(H, W, [np.array([1, 29]), np.array([], dtype=np.int64)])
    np.testing.assert_allclose(got[0], (H[0] @ W[[1, 29]].T), rtol=1e-5)
    assert got[1].size == 0


# ----------------------------------------------------------------------------- term map


def _byte_level_tokenizer():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = ["<s>", "stock", "Ġstock", "Stock", "ĠStock", "Ġ", "Ċ", "ĠĊ", "Ġmarket", "market", "s",
             "Ã", "ĠST", "<unk>"]
    tk = Tokenizer(models.WordLevel({t: i for i, t in enumerate(vocab)}, unk_token="<unk>"))
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tk.decoder = decoders.ByteLevel()
    return PreTrainedTokenizerFast(tokenizer_object=tk, bos_token="<s>", unk_token="<unk>"), vocab


def _metaspace_tokenizer():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = ["<pad>", "▁stock", "stock", "Stock", "▁Stock", "▁", "▁market", "<unk>"]
    tk = Tokenizer(models.WordLevel({t: i for i, t in enumerate(vocab)}, unk_token="<unk>"))
    tk.pre_tokenizer = pre_tokenizers.Metaspace()
    tk.decoder = decoders.Metaspace()
    return PreTrainedTokenizerFast(tokenizer_object=tk, pad_token="<pad>", unk_token="<unk>"), vocab


def test_folding_byte_level_variants(tmp_path):
    tok, vocab = _byte_level_tokenizer()
    V = len(vocab) + 3  # LM head padded beyond the tokenizer
    tm = TermMap.from_tokenizer(tok, vocab_size=V)
    t = {w: int(tm.map_ids(np.array([vocab.index(w)]))[0]) for w in vocab}
    assert t["stock"] == t["Ġstock"] == t["Stock"] == t["ĠStock"]
    assert t["market"] == t["Ġmarket"] != t["stock"]
    # whitespace-only tokens and partial bytes keep their own terms
    assert len({t["Ġ"], t["Ċ"], t["ĠĊ"], t["Ã"]}) == 4
    assert tm.term_strings[t["stock"]] == "stock"
    assert tm.n_terms == len(set(tm.token_to_term.tolist()))
    assert len(set(tm.term_strings)) == tm.n_terms
    assert all(s and not any(c.isspace() for c in s) for s in tm.term_strings)
    assert tm.term_strings[tm.token_to_term[V - 1]] == f"⟨{V - 1}⟩"
    tm.save(tmp_path / "tm")
    back = TermMap.load(tmp_path / "tm")
    np.testing.assert_array_equal(back.token_to_term, tm.token_to_term)
    assert back.term_strings == tm.term_strings and back.fingerprint() == tm.fingerprint()


def test_folding_metaspace_variants_and_identity():
    tok, vocab = _metaspace_tokenizer()
    tm = TermMap.from_tokenizer(tok, fold=True)
    ids = [vocab.index(w) for w in ("▁stock", "stock", "Stock", "▁Stock")]
    assert len(set(tm.map_ids(np.array(ids)).tolist())) == 1
    ident = TermMap.from_tokenizer(tok, fold=False)
    assert ident.n_terms == len(vocab)
    np.testing.assert_array_equal(ident.token_to_term, np.arange(len(vocab)))
    assert ident.term_strings[vocab.index("▁stock")] == "▁stock"
    assert len(set(ident.term_strings)) == ident.n_terms


# ----------------------------------------------------------------------------- eq.15 / eq.16


@pytest.mark.parametrize("weighting", ["raw", "relu", "log1p"])
def test_doc_vectors_eq15(weighting):
    H, W = _rand(5, 40, 8, seed=3)
    mask = [1, 2]
    D = doc_vectors(H, W, 6, weighting=weighting, mask_ids=mask, chunk=9)
    assert isinstance(D, sp.csr_matrix) and D.dtype == np.float32 and D.shape == (5, 40)
    ref_ids, ref_l = _full_topk(H, W, 6, mask)
    for i in range(5):
        w = {"raw": ref_l[i], "relu": np.maximum(ref_l[i], 0), "log1p": np.log1p(np.maximum(ref_l[i], 0))}[weighting]
        expect = {int(t): float(x) for t, x in zip(ref_ids[i], w) if x != 0}
        row = D.getrow(i)
        got = dict(zip(row.indices.tolist(), row.data.tolist()))
        assert got.keys() == expect.keys()
        for t in expect:
            assert got[t] == pytest.approx(expect[t], rel=1e-5, abs=1e-5)


@pytest.mark.parametrize("weighting", ["raw", "log1p"])
def test_doc_vectors_from_a_larger_topk_equal_a_direct_projection(weighting):
    """A sweep projects once at the largest K and slices: identical to projecting at each K."""
    H, W = _rand(7, 300, 8, seed=5)
    mask = [0, 3]
    ids, logits = project_topk(H, W, 120, mask_ids=mask, chunk=64)
    for K in (1, 17, 120):
        direct = doc_vectors(H, W, K, weighting=weighting, mask_ids=mask, chunk=64)
        sliced = doc_vectors_from_topk(ids[:, :K], logits[:, :K], 300, weighting)
        assert (direct != sliced).nnz == 0 and np.array_equal(direct.indices, sliced.indices)


def test_doc_vectors_fold_by_max():
    tok, vocab = _byte_level_tokenizer()
    tm = TermMap.from_tokenizer(tok)
    V, d = len(vocab), 4
    W = np.zeros((V, d), dtype=np.float32)
    for w, val in [("stock", 3.0), ("Ġstock", 5.0), ("Stock", 1.0), ("market", 2.0), ("Ġ", -1.0)]:
        W[vocab.index(w), 0] = val
    h = np.array([[1.0, 0, 0, 0]], dtype=np.float32)
    D = doc_vectors(h, W, 4, term_map=tm)  # top-4 tokens: Ġstock 5, stock 3, market 2, Stock 1
    assert D.shape == (1, tm.n_terms)
    got = {tm.term_strings[c]: v for c, v in zip(D.indices, D.data)}
    assert got == {"stock": 5.0, "market": 2.0}


def test_query_vectors_eq16_token_set():
    H, W = _rand(3, 50, 8, seed=4)
    surface = [np.array([10, 10, 11, 1]), np.array([], dtype=np.int64), np.array([49])]
    mask = [1]
    Q = query_vectors(H, surface, W, 5, mask_ids=mask)
    top, _ = _full_topk(H, W, 5, mask)
    for i in range(3):
        expect = (set(surface[i].tolist()) - {1}) | set(top[i].tolist())
        row = Q.getrow(i)
        assert set(row.indices.tolist()) == expect
        assert (row.data == 1.0).all()
    Q0 = query_vectors(H, surface, W, 0, mask_ids=mask)  # no expansion: surface tokens only
    assert set(Q0.getrow(0).indices.tolist()) == {10, 11}
    assert Q0.getrow(1).nnz == 0
    Qr = query_vectors(H, surface, W, 5, weighting="raw", mask_ids=mask)
    row = Qr.getrow(0)
    np.testing.assert_allclose(row.data, H[0] @ W[row.indices].T, rtol=1e-5)


def test_query_vectors_bad_input():
    H, W = _rand(2, 10, 4)
    with pytest.raises(ValueError, match="surface"):
        query_vectors(H, [np.array([1])], W, 2)
    with pytest.raises(ValueError, match="outside"):
        query_vectors(H, [np.array([1]), np.array([10])], W, 2)
    with pytest.raises(ValueError, match="weighting"):
        query_vectors(H, [np.array([1])] * 2, W, 2, weighting="idf")
    with pytest.raises(ValueError, match="weighting"):
        doc_vectors(H, W, 2, weighting="binary")


def test_sparse_dot_is_the_papers_similarity():
    """Binary query · eq.15 doc = Σ_{t ∈ T̃_q ∩ T̂_d^K} w_t (eq.16), computed with python sets."""
    Hq, W = _rand(4, 60, 8, seed=5)
    Hd, _ = _rand(7, 60, 8, seed=6)
    surface = [np.array([3, 4]), np.array([5]), np.array([0, 59]), np.array([], dtype=np.int64)]
    Q = query_vectors(Hq, surface, W, 8)
    D = doc_vectors(Hd, W, 15)
    S = (Q @ D.T).toarray()
    top_q, _ = _full_topk(Hq, W, 8)
    top_d, l_d = _full_topk(Hd, W, 15)
    for i in range(4):
        tq = set(surface[i].tolist()) | set(top_q[i].tolist())
        for j in range(7):
            w = dict(zip(top_d[j].tolist(), l_d[j].tolist()))
            assert S[i, j] == pytest.approx(sum(w[t] for t in tq & w.keys()), rel=1e-5, abs=1e-5)
            contrib = explain(Q.getrow(i), D.getrow(j))
            assert {c.term for c in contrib} == tq & w.keys()
            assert sum(c.contribution for c in contrib) == pytest.approx(S[i, j], rel=1e-5, abs=1e-5)
            assert all(a.contribution >= b.contribution for a, b in zip(contrib, contrib[1:]))


def test_explain_names_terms():
    tok, vocab = _byte_level_tokenizer()
    tm = TermMap.from_tokenizer(tok)
    n = tm.n_terms
    s, m = tm.map_ids(np.array([vocab.index("stock"), vocab.index("market")]))
    q = sp.csr_matrix(([1.0, 2.0], ([0, 0], [s, m])), shape=(1, n))
    d = sp.csr_matrix(([4.0, 0.5], ([0, 0], [s, m])), shape=(1, n))
    out = explain(q, d, tm)
    assert [(c.string, c.query_weight, c.doc_weight, c.contribution) for c in out] == [
        ("stock", 1.0, 4.0, 4.0), ("market", 2.0, 0.5, 1.0)]
    with pytest.raises(ValueError, match="terms"):
        explain(q, sp.csr_matrix((1, n + 1)), tm)


# ----------------------------------------------------------------------------- PC1, eq.14


def test_fit_pc1_recovers_planted_component_with_fixed_sign():
    rng = np.random.default_rng(7)
    d = 24
    u = rng.standard_normal(d)
    u /= np.linalg.norm(u)
    a = rng.normal(10.0, 1.0, size=500)
    H = (a[:, None] * u[None, :] + 0.3 * rng.standard_normal((500, d))).astype(np.float32)
    u1 = fit_pc1(H)
    assert u1.dtype == np.float32 and u1.shape == (d,)
    assert np.linalg.norm(u1) == pytest.approx(1.0, abs=1e-5)
    assert float(u1 @ u) > 0.99  # right direction and sign (sample projects positively)
    np.testing.assert_allclose(fit_pc1(-H), -u1, atol=1e-6)
    # centred: the planted direction of largest variance
    b = rng.normal(0.0, 5.0, size=500)
    Hc = (b[:, None] * u[None, :] + 0.3 * rng.standard_normal((500, d)) + 2.0).astype(np.float32)
    assert abs(float(fit_pc1(Hc, center=True) @ u)) > 0.99


def test_svd_basis_is_orthonormal_and_sorted():
    H, _ = _rand(50, 2, 6, seed=8)
    U, s = svd_basis(H)
    np.testing.assert_allclose(U.T @ U, np.eye(6), atol=1e-10)
    assert (np.diff(s) <= 1e-12).all()
    np.testing.assert_allclose(s, np.linalg.svd(H.astype(np.float64), compute_uv=False), rtol=1e-8)
    assert ((H @ U).mean(axis=0) > 0).all()


def test_adjust_moves_rankings_as_the_algebra_says():
    """Logits of h + λu1 are E·h + λ·E·u1: two tokens swap order exactly at
    λ* = (l_a - l_b) / (c_b - c_a) with c = E·u1."""
    H, W = _rand(1, 30, 8, seed=9)
    u1 = np.random.default_rng(10).standard_normal(8).astype(np.float32)
    u1 /= np.linalg.norm(u1)
    lam = -2.5
    Ha = adjust(H, u1, lam)
    np.testing.assert_allclose(Ha, H + lam * u1, rtol=1e-6)
    ids, logits = project_topk(Ha, W, 30)
    np.testing.assert_allclose(logits[0], (W @ H[0] + lam * (W @ u1))[ids[0]], rtol=1e-4, atol=1e-5)
    lg, c = W @ H[0], W @ u1
    a = int(np.argmax(lg))
    b = max((t for t in range(30) if t != a), key=lambda t: abs(c[t] - c[a]))
    lam_star = (lg[a] - lg[b]) / (c[b] - c[a])  # any sign: a leads b on (0, λ*), b leads beyond
    def rank(lam_):
        r = project_topk(adjust(H, u1, lam_), W, 30)[0][0].tolist()
        return r.index(a), r.index(b)
    ra, rb = rank(lam_star * 0.9)
    assert ra < rb
    ra, rb = rank(lam_star * 1.1)
    assert rb < ra
    # far enough along u1, the top token is argmax E·u1
    assert project_topk(adjust(H, u1, 1e4), W, 1)[0][0, 0] == int(np.argmax(c))
    with pytest.raises(ValueError, match="dimension"):
        adjust(H, u1[:4], 1.0)



def test_the_mask_of_the_same_ids_is_built_once():
    """A query's projection does not rebuild the vocabulary mask: the same ids (in any order,
    any container) give the same tensor, which masks exactly them."""
    from alignir.encoders.aligned import token_mask

    mask = np.arange(0, 40_000, 97)
    assert token_mask(mask, 40_000) is token_mask(list(mask[::-1]), 40_000)
    assert torch.equal(torch.nonzero(token_mask(mask, 40_000)).ravel(), torch.from_numpy(mask))
    assert token_mask(mask, 50_000) is not token_mask(mask, 40_000) and token_mask([], 10) is None
