"""The benchmark anchors (benchmarks/quality/anchors.py): the SPLADE pooling on a tiny masked LM equals
its definition, the inverted-index lists equal brute force, the BM25 leg is the product's, and
recorded rows replace their own (dataset, model, method) only."""
from __future__ import annotations

import json

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from benchmarks.quality import anchors

from conftest import TINY_CORPUS, TRAIN_QUERIES

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def tiny_mlm(tmp_path_factory, tiny_tokenizer):
    from transformers import BertConfig, BertForMaskedLM

    torch.manual_seed(5)
    root = tmp_path_factory.mktemp("cognition")
    BertForMaskedLM(BertConfig(vocab_size=len(tiny_tokenizer), hidden_size=16, num_hidden_layers=1,
                               num_attention_heads=2, intermediate_size=32, max_position_embeddings=128,
                               pad_token_id=tiny_tokenizer.pad_token_id)).save_pretrained(root / "model")
    tiny_tokenizer.save_pretrained(root / "model")
    return root


def test_splade_weights_are_the_masked_max_of_log1p_relu(tiny_mlm, monkeypatch):
    from transformers import AutoTokenizer, BertForMaskedLM

    monkeypatch.setattr(anchors, "package_dir", lambda module, hint: tiny_mlm)
    encode = anchors.splade_encoder(max_length=64, batch=4)
    texts = TINY_CORPUS[:5]
    got = encode(texts, "document")
    tok = AutoTokenizer.from_pretrained(tiny_mlm / "model")
    model = BertForMaskedLM.from_pretrained(tiny_mlm / "model").eval()
    for i, t in enumerate(texts):  # one text at a time: no padding at all
        enc = tok([t], return_tensors="pt", truncation=True, max_length=64)
        with torch.no_grad():
            want = torch.log1p(torch.relu(model(**enc).logits[0])).max(0).values.numpy()
        np.testing.assert_allclose(got[i].toarray()[0], want, rtol=1e-5, atol=1e-6)
    assert got.shape == (5, len(tok)) and got.nnz > 0


def test_index_lists_equal_brute_force():
    rng = np.random.default_rng(0)
    D = sp.random(40, 30, density=0.2, random_state=1, format="csr", dtype=np.float32)
    Q = sp.random(6, 30, density=0.3, random_state=2, format="csr", dtype=np.float32)
    got = anchors.anchor_lists("sparse", D, Q, 5)
    S = (Q @ D.T).toarray()
    for row, lst in zip(S, got):
        want = sorted(((-row[j], j) for j in np.flatnonzero(row)))[:5]
        assert [d for _, d in want] == list(lst)
        np.testing.assert_allclose([lst[d] for _, d in want], [-s for s, _ in want], rtol=1e-5)
    Dd, Qd = rng.normal(size=(20, 4)).astype(np.float32), rng.normal(size=(3, 4)).astype(np.float32)
    dense = anchors.anchor_lists("dense", Dd, Qd, 4)
    for q, lst in zip(Qd, dense):
        s = Dd @ q
        assert list(lst) == list(np.argsort(-s, kind="stable")[:4])


def test_bm25_leg_is_the_product_bm25():
    from alignir.retrieval.bm25 import bm25_run

    texts = TINY_CORPUS
    leg = anchors.BM25Leg(texts)
    got = leg.lists(TRAIN_QUERIES, 3)
    want = bm25_run({str(i): t for i, t in enumerate(texts)}, {str(i): q for i, q in enumerate(TRAIN_QUERIES)},
                    k=3, show_progress=False)
    for i, lst in enumerate(got):
        assert [str(d) for d in lst] == list(want[str(i)])
        np.testing.assert_allclose(list(lst.values()), list(want[str(i)].values()), rtol=1e-5)


def test_record_replaces_only_its_rows(tmp_path):
    out = tmp_path / "quality.json"
    out.write_text(json.dumps([{"dataset": "adi", "model": "m", "method": "dense", "ndcg@10": 0.1},
                               {"dataset": "adi", "model": "x", "method": "dense", "ndcg@10": 0.2}]))
    anchors.record([{"dataset": "adi", "model": "m", "method": "dense", "ndcg@10": 0.3},
                    {"dataset": "med", "model": "m", "method": "dense", "ndcg@10": 0.4}], out)
    rows = json.loads(out.read_text())
    assert [(r["model"], r["dataset"], r["ndcg@10"]) for r in rows] == [("x", "adi", 0.2), ("m", "adi", 0.3),
                                                                         ("m", "med", 0.4)]


def test_table_renders_the_recorded_rows():
    rows = [{"dataset": "med", "model": "alignir-bm25", "method": "bm25", "ndcg@10": 0.6668},
            {"dataset": "med", "model": "all-MiniLM-L6-v2", "method": "dense", "ndcg@10": 0.78754},
            {"dataset": "adi", "model": "alignir-bm25", "method": "bm25", "ndcg@10": 0.4752}]
    lines = anchors.render(rows).splitlines()
    assert lines[2].startswith("| adi | 0.475 | – |") and lines[3].startswith("| med | 0.667 | 0.788 | – |")


def test_the_documented_table_is_the_recorded_one():
    """The training findings print the anchors' table as rendered from benchmarks/results/quality.json."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    doc = (root / "benchmarks" / "reports" / "training-findings.md").read_text()
    table = anchors.render(json.loads((root / "benchmarks" / "results" / "quality.json").read_text()))
    assert table in doc


def test_dense_anchor_documents_resume_from_the_embedding_cache(tmp_path):
    """A dense anchor's document vectors go through the embedding cache in parts: a run that
    stops after its first part resumes with only the rest, and a rerun encodes nothing."""
    from alignir.encoders.cache import EmbeddingCache

    texts = [f"document number {i} " + "word " * (i % 7) for i in range(300)]
    seen: list[int] = []
    stop_after: list[int] = []

    def encode(batch, role):
        if stop_after and len(seen) >= stop_after[0]:
            raise KeyboardInterrupt
        seen.extend(len(t) for t in batch)
        return np.stack([np.array([len(t), t.count("word"), 1.0], dtype=np.float32) for t in batch])

    want = np.stack([np.array([len(t), t.count("word"), 1.0], dtype=np.float32) for t in texts])
    emb = anchors.AnchorEmbedder("probe-anchor", 64, encode)
    assert emb.dim == 3 and emb.fingerprint()["anchor"] == "probe-anchor"
    seen.clear()
    stop_after.append(128)
    with pytest.raises(KeyboardInterrupt):
        EmbeddingCache(tmp_path).encode_cached(emb, texts, "document", shard_size=128, progress=False)
    assert len(seen) == 128
    stop_after.clear()
    seen.clear()
    got = EmbeddingCache(tmp_path).encode_cached(emb, texts, "document", shard_size=128, progress=False)
    assert len(seen) == 300 - 128
    np.testing.assert_array_equal(got, want)
    seen.clear()
    again = EmbeddingCache(tmp_path).encode_cached(anchors.AnchorEmbedder("probe-anchor", 64, encode), texts,
                                                   "document", shard_size=128, progress=False)
    assert seen == [len("a probe")] or seen == []  # at most the dimension probe
    np.testing.assert_array_equal(again, want)
