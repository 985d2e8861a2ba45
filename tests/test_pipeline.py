"""Index pipeline + Searcher on a tiny random Llama: exact scores, explain, resparsify,
fingerprints, filters, thread safety. (The real-model end-to-end run is in test_cli_e2e.py.)"""
from __future__ import annotations

import dataclasses
import logging
import shutil
import threading

import numpy as np
import pytest
import scipy.sparse as sp

from alignir.errors import AlignirError

from alignir.encoders.models import load_model
from alignir.index.store import open_index
from alignir.errors import FingerprintMismatch
from alignir.retrieval.config import SparseConfig
from alignir.retrieval.indexer import build_index, resparsify
from alignir.retrieval.searcher import Searcher
from alignir.retrieval.sparsify import Sparsifier

from conftest import TINY_CORPUS, write_corpus

QUERIES = ["light and carbon in plants", "interest rates and the stock market", "supersonic wind tunnel"]


@pytest.fixture()
def corpus_file(tmp_path):
    texts = TINY_CORPUS + [t.upper() for t in TINY_CORPUS] + [t[::-1] for t in TINY_CORPUS]
    return write_corpus(tmp_path / "corpus.jsonl", texts)


@pytest.fixture()
def built(tmp_path, corpus_file, tiny_model):
    cfg = SparseConfig.paper(doc_k=24, query_m=5)
    build_index(corpus_file, tmp_path / "idx", model="tiny", sparse=cfg, loaded=tiny_model,
                cache_dir=tmp_path / "cache", progress=False)
    return tmp_path / "idx"


def _brute_force(searcher, queries):
    """Q @ D.T with D rebuilt from the stored dense vectors by the same Sparsifier."""
    H = np.asarray(searcher.index.dense_vectors, dtype=np.float32)
    D = searcher.sparsifier.documents(H)
    Q = searcher.encode(queries).legs["sparse"]
    return (Q @ D.T).toarray()


def test_sparse_scores_equal_brute_force(built, tiny_model):
    s = Searcher.open(built, loaded=tiny_model)
    S = _brute_force(s, QUERIES)
    hits = s.batch_search(QUERIES, k=5, mode="sparse")
    for i, hs in enumerate(hits):
        order = sorted(range(S.shape[1]), key=lambda j: (-S[i, j], j))
        expected = [j for j in order if S[i, j] != 0][:5]
        assert [h.doc_number for h in hs] == expected
        for h in hs:
            assert h.score == pytest.approx(S[i, h.doc_number], rel=1e-5, abs=1e-4)


def test_explain_contributions_sum_to_sparse_score(built, tiny_model):
    s = Searcher.open(built, loaded=tiny_model)
    for h in s.search(QUERIES[0], k=4, mode="sparse", explain=True):
        assert h.explanation, "a sparse hit shares at least one term"
        assert sum(c.contribution for c in h.explanation) == pytest.approx(h.score, rel=1e-4, abs=1e-3)
        assert all(" " not in c.string for c in h.explanation)


def test_dense_mode_equals_centred_cosine(built, tiny_model):
    """The default dense side: vectors centred on the corpus mean, then cosine."""
    s = Searcher.open(built, loaded=tiny_model)
    H = np.asarray(s.index.dense_vectors, dtype=np.float64)
    mu = H.mean(axis=0)
    unit = lambda x: x / np.linalg.norm(x, axis=-1, keepdims=True)  # noqa: E731
    q = s.encode([QUERIES[1]]).legs["dense"][0].astype(np.float64)
    scores = unit(H - mu) @ unit(q - mu)
    hits = s.search(QUERIES[1], k=3, mode="dense")
    assert [h.doc_number for h in hits] == list(np.argsort(-scores, kind="stable")[:3])
    assert hits[0].score == pytest.approx(float(scores.max()), rel=1e-4)


def test_hybrid_fuses_both_sides(built, tiny_model):
    s = Searcher.open(built, loaded=tiny_model)
    hy = s.search(QUERIES[0], k=5, mode="hybrid", fusion="minmax", alpha=0.5)
    assert [h.rank for h in hy] == [1, 2, 3, 4, 5]
    assert all(h.dense_score is not None for h in hy)
    # alpha = 1 is the dense ranking, alpha = 0 the sparse one (within the fused depth)
    only_dense = s.search(QUERIES[0], k=5, mode="hybrid", alpha=1.0)
    dense = s.search(QUERIES[0], k=5, mode="dense")
    assert [h.id for h in only_dense] == [h.id for h in dense]


def test_allowed_ids_never_leak(built, tiny_model):
    s = Searcher.open(built, loaded=tiny_model)
    allowed = {"d1", "d4"}
    for mode in ("sparse", "dense", "hybrid"):
        hits = s.search(QUERIES[0], k=10, mode=mode, allowed_ids=allowed)
        assert {h.id for h in hits} <= allowed
    with pytest.raises(ValueError, match="not in the index"):
        s.search(QUERIES[0], allowed_ids=["nope"])
    with pytest.raises(AlignirError, match="not the single string"):  # "d1" is not the ids "d" and "1"
        s.search(QUERIES[0], allowed_ids="d1")


def test_concurrent_searches_equal_serial(built, tiny_model):
    s = Searcher.open(built, loaded=tiny_model)
    queries = QUERIES * 4
    serial = [[(h.id, h.score) for h in s.search(q, k=5)] for q in queries]
    out: list = [None] * len(queries)

    def work(i):
        out[i] = [(h.id, h.score) for h in s.search(queries[i], k=5)]

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(queries))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert out == serial


def test_resparsify_equals_fresh_build(tmp_path, built, corpus_file, tiny_model):
    resparsify(built, loaded=tiny_model, doc_k=8, doc_weighting="log1p", pc1_lambda=0.5)
    fresh = tmp_path / "fresh"
    build_index(corpus_file, fresh, model="tiny", loaded=tiny_model, cache_dir=tmp_path / "cache",
                sparse=SparseConfig(doc_k=8, query_m=5, doc_weighting="log1p", pc1_lambda=0.5,
                                    pc1_remove=None, query_weighting="binary"),
                progress=False)
    a, b = Searcher.open(built, loaded=tiny_model), Searcher.open(fresh, loaded=tiny_model)
    assert a.sparsifier.config == b.sparsifier.config
    for q in QUERIES:
        ha, hb = a.search(q, k=6, mode="sparse"), b.search(q, k=6, mode="sparse")
        assert [(h.id, round(h.score, 4)) for h in ha] == [(h.id, round(h.score, 4)) for h in hb]
    stored = open_index(built)
    assert stored.manifest["parts"]["sparse"]["n_postings"] <= 8 * stored.n_docs


def test_resparsify_with_folding_rewrites_term_map(built, tiny_model):
    resparsify(built, loaded=tiny_model, fold=True)
    s = Searcher.open(built, loaded=tiny_model)
    assert s.sparsifier.term_map.kind == "fold"
    assert s.sparsifier.term_map.n_terms < tiny_model.vocab_size
    assert s.search(QUERIES[0], k=3, mode="sparse")


def test_fingerprint_mismatch_refused(built, tiny_model_bos):
    with pytest.raises(FingerprintMismatch):
        Searcher.open(built, loaded=tiny_model_bos)


def test_a_model_folder_whose_tokenizer_changed_is_refused(tmp_path, corpus_file, tiny_folder):
    folder = tmp_path / "model"
    shutil.copytree(tiny_folder, folder)
    loaded = load_model(str(folder), device="cpu")
    build_index(corpus_file, tmp_path / "idx", model=str(folder), loaded=loaded,
                sparse=SparseConfig.paper(doc_k=24, query_m=5), cache_dir=tmp_path / "cache", progress=False)
    assert Searcher.open(tmp_path / "idx", loaded=load_model(str(folder), device="cpu")).search(QUERIES[0], k=2)
    # same weights, another tokenizer: the sparse legs would read other token ids
    loaded.tokenizer.add_tokens(["photosynthesis"])
    loaded.tokenizer.save_pretrained(folder)
    changed = load_model(str(folder), device="cpu")
    assert changed.identity["sha256"] == loaded.identity["sha256"]
    with pytest.raises(FingerprintMismatch, match="tokenizer_sha256"):
        Searcher.open(tmp_path / "idx", loaded=changed)


def test_an_index_built_before_tokenizers_were_hashed_still_opens(tmp_path, corpus_file, tiny_folder, caplog):
    loaded = load_model(str(tiny_folder), device="cpu")
    assert len(loaded.identity["tokenizer_sha256"]) == 64
    old = dataclasses.replace(loaded, identity={k: v for k, v in loaded.identity.items() if k != "tokenizer_sha256"})
    build_index(corpus_file, tmp_path / "idx", model=str(tiny_folder), loaded=old,
                sparse=SparseConfig.paper(doc_k=24, query_m=5), cache_dir=tmp_path / "cache", progress=False)
    with caplog.at_level(logging.WARNING):
        hits = Searcher.open(tmp_path / "idx", loaded=loaded).search(QUERIES[0], k=3)
    assert "records no hash of its model's tokenizer" in caplog.text
    assert [h.id for h in hits] == [h.id for h in Searcher.open(tmp_path / "idx", loaded=old).search(QUERIES[0], k=3)]


def test_query_instruction_does_not_break_fingerprint(built, tiny_model):
    s = Searcher.open(built, loaded=tiny_model, instruction="scifact")
    assert s.search(QUERIES[0], k=2)


def test_bad_queries(built, tiny_model):
    s = Searcher.open(built, loaded=tiny_model)
    for bad in ("", "   "):
        with pytest.raises(ValueError, match="empty"):
            s.search(bad)
    with pytest.raises(ValueError, match="mode"):
        s.search("x", mode="splade")
    with pytest.raises(ValueError, match="k must"):
        s.search("x", k=0)
    assert len(s.search("plants", k=1000, mode="dense")) == s.index.n_docs
    for mode in ("sparse", "dense", "bm25"):  # an undecodable byte (a lone surrogate) is refused in every mode
        with pytest.raises(AlignirError, match="not valid text"):
            s.search("retrieval \udcff systems", mode=mode)


def test_sparsifier_query_tokens_are_surface_union_topm(tiny_model):
    cfg = SparseConfig.paper(doc_k=10, query_m=3)
    sp_ = Sparsifier.for_model(tiny_model, cfg)
    H = np.random.default_rng(0).standard_normal((2, tiny_model.hidden_size)).astype(np.float32)
    surface = [np.array([5, 7], dtype=np.int32), np.array([], dtype=np.int32)]
    Q = sp_.queries(H, surface)
    logits = H @ tiny_model.lm_head.detach().numpy().T
    logits[:, tiny_model.special_ids] = -np.inf
    for i in range(2):
        top = set(np.argsort(-logits[i])[:3].tolist())
        expected = (set(surface[i].tolist()) - set(tiny_model.special_ids.tolist())) | top
        assert set(Q[i].indices.tolist()) == expected
        assert np.all(Q[i].data == 1.0)
    assert isinstance(Q, sp.csr_matrix)


@pytest.mark.parametrize("fold", [False, True])
def test_sparsifier_documents_from_a_cached_topk(tiny_model, fold):
    """documents_from_topk (a sweep's cache) equals documents() with λ, weighting and folding."""
    H = np.random.default_rng(1).standard_normal((4, tiny_model.hidden_size)).astype(np.float32)
    u1 = np.linalg.svd(H, full_matrices=False)[2][0]
    cfg = SparseConfig(doc_k=12, pc1_lambda=-0.7, pc1_remove=None, doc_weighting="log1p", fold=fold)
    sp_ = Sparsifier.for_model(tiny_model, cfg, pc1=u1)
    cached = sp_.document_topk(H, 30)
    assert (sp_.documents_from_topk(*cached) != sp_.documents(H)).nnz == 0
    with pytest.raises(ValueError, match="fewer than doc_k"):
        sp_.documents_from_topk(cached[0][:, :5], cached[1][:, :5])


def test_pc1_remove_sets_lambda_from_corpus(built, tiny_model):
    resparsify(built, loaded=tiny_model, pc1_remove=0.5)
    stored = open_index(built)
    H = np.asarray(stored.dense_vectors, dtype=np.float32)
    expected = -0.5 * float(np.mean(H @ stored.pc1))
    cfg = stored.params["sparse"]
    assert cfg["pc1_remove"] == 0.5
    assert cfg["pc1_lambda"] == pytest.approx(expected, rel=1e-5, abs=1e-6)
    resparsify(built, loaded=tiny_model, pc1_lambda=0.0)  # an explicit λ replaces the fraction
    assert open_index(built).params["sparse"]["pc1_remove"] is None


def test_run_queries_drops_self_hits_only_when_asked(built, tiny_model):
    from alignir.retrieval.evaluation import run_queries

    s = Searcher.open(built, loaded=tiny_model)
    queries = {"d0": TINY_CORPUS[0]}  # query id equal to a document id (ArguAna-style)
    kept, _ = run_queries(s, queries, ("dense",), k=3, progress=False, drop_self=False)
    dropped, _ = run_queries(s, queries, ("dense",), k=3, progress=False, drop_self=True)
    assert "d0" in kept["dense"]["d0"] and len(kept["dense"]["d0"]) == 3
    assert "d0" not in dropped["dense"]["d0"] and len(dropped["dense"]["d0"]) == 3
