"""The aligned-token map: its loss against a hand computation, its training, and adapters that carry one."""
from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch

from alignir.encoders.train.aligned_loss import AlignedScoreConfig, aligned_weights
from alignir.encoders.train.sparse_map import (MapExamples, SparseMapConfig, dense_hard_negatives, map_loss,
                                               train_sparse_map)
from alignir.errors import InvalidInputError
from conftest import share_model_cache, TINY_CORPUS, TRAIN_QUERIES

pytestmark = pytest.mark.usefixtures("one_thread")


def _toy(seed=0, n=6, m=8, d=5, V=20):
    g = torch.Generator().manual_seed(seed)
    W = torch.randn(V, d, generator=g)
    docs = torch.randn(m, d, generator=g)
    queries = docs[:n] + 0.3 * torch.randn(n, d, generator=g)
    surface = [np.array([i % V, (3 * i + 1) % V], dtype=np.int32) for i in range(n)]
    return W, queries, docs, surface


def test_map_loss_is_multi_positive_infonce_over_the_index_scores():
    W, q, docs, surface = _toy()
    positives = [[0, 6], [1], [2], [3, 7], [4], [5]]
    ex = MapExamples("toy", q, docs, surface, positives)
    A = torch.eye(5) + 0.1 * torch.randn(5, 5, generator=torch.Generator().manual_seed(1))
    cfg = SparseMapConfig(hard_negatives=0, random_negatives=8, doc_k=6, query_m=3, spread=2.0)
    rows = np.array([0, 3, 4])
    got = map_loss(A, torch.tensor(0.3), ex, rows, W, None, cfg, np.random.default_rng(0))
    # by hand: every document is a candidate (8 random of 8), scores of the index's weights
    qw, dw = aligned_weights(q[rows] @ A.T, docs @ A.T, W, [surface[i] for i in rows], None,
                             AlignedScoreConfig(doc_k=6, query_m=3, pc1_remove=None))
    S = (qw @ dw.T).double().numpy()
    want = []
    for r, i in enumerate(rows):
        tau = S[r].std(ddof=1) / 2.0 * np.exp(0.3)
        z = S[r] / tau
        want.append(np.log(np.exp(z).sum()) - np.log(np.exp(z[positives[i]]).sum()))
    assert float(got) == pytest.approx(float(np.mean(want)), rel=1e-5)


def test_training_raises_the_rank_of_the_positives():
    W, q, docs, surface = _toy(seed=2, n=8, m=8, d=6, V=30)
    q = q @ torch.diag(torch.tensor([3.0, 0.2, 1.0, 0.2, 2.0, 0.5]))  # queries skewed: the identity misranks
    ex = MapExamples("toy", q, docs, surface, [[i] for i in range(8)])

    def mrr(A):
        qw, dw = aligned_weights(q @ A.T, docs @ A.T, W, ex.surface, None,
                                 AlignedScoreConfig(doc_k=10, query_m=5, pc1_remove=None))
        S = qw @ dw.T
        ranks = (S > S.diagonal()[:, None]).sum(1) + 1
        return float((1.0 / ranks).mean())

    cfg = SparseMapConfig(steps=150, lr=0.02, batch_size=8, hard_negatives=0, random_negatives=8,
                          identity_weight=0.0, doc_k=10, query_m=5)
    A, log = train_sparse_map([ex], W, None, cfg, evaluate=mrr, eval_every=50)
    assert log[0]["step"] == 0 and log[-1]["step"] == 150
    assert log[-1]["eval"] > log[0]["eval"] + 0.1, (log[0], log[-1])
    assert mrr(A) == pytest.approx(log[-1]["eval"])
    assert not torch.equal(A, torch.eye(6))


def test_the_identity_penalty_holds_the_map_near_the_identity():
    W, q, docs, surface = _toy(seed=3)
    ex = MapExamples("toy", q, docs, surface, [[i] for i in range(6)])
    free, _ = train_sparse_map([ex], W, None, SparseMapConfig(steps=40, lr=0.05, batch_size=6, identity_weight=0.0,
                                                               doc_k=6, query_m=3))
    held, _ = train_sparse_map([ex], W, None, SparseMapConfig(steps=40, lr=0.05, batch_size=6, identity_weight=5.0,
                                                               doc_k=6, query_m=3))
    assert (held - torch.eye(5)).norm() < 0.5 * (free - torch.eye(5)).norm()


def test_bad_examples_and_settings_are_refused():
    W, q, docs, surface = _toy()
    with pytest.raises(InvalidInputError, match="no positive"):
        MapExamples("toy", q, docs, surface, [[0], [], [2], [3], [4], [5]])
    with pytest.raises(InvalidInputError, match="outside"):
        MapExamples("toy", q, docs, surface, [[0], [1], [2], [3], [4], [99]])
    with pytest.raises(InvalidInputError, match="one entry per query"):
        MapExamples("toy", q, docs, surface[:2], [[i] for i in range(6)])
    with pytest.raises(InvalidInputError, match="breadth"):
        SparseMapConfig(breadth=1.5)
    with pytest.raises(InvalidInputError, match="lr"):
        SparseMapConfig(lr=0.0)
    with pytest.raises(InvalidInputError, match="at least one"):
        train_sparse_map([], W, None)


def test_dense_hard_negatives_are_the_nearest_non_positives():
    docs = torch.eye(4)
    q = torch.tensor([[1.0, 0.9, 0.1, 0.0]])
    assert dense_hard_negatives(q, docs, [[0]], depth=2) == [[1, 2]]


def _with_map(adapter, dest, A):
    from safetensors.torch import save_file

    from alignir.encoders.embedders.adapters import SPARSE_MAP_FILE

    shutil.copytree(adapter, dest)
    save_file({"sparse_map": A.contiguous()}, str(dest / SPARSE_MAP_FILE))
    return dest


def test_an_adapter_with_a_map_reads_its_tokens_through_it(tiny_adapter, tiny_model, tmp_path):
    from alignir.encoders.cache import dense_fingerprint
    from alignir.encoders.embedders.infonce import InfoNCEEmbedder
    from alignir.retrieval.config import SparseConfig
    from alignir.retrieval.encoder import Encoder
    from alignir.retrieval.sparsify import Sparsifier

    d = int(tiny_model.lm_head.shape[1])
    A = torch.eye(d) + 0.2 * torch.randn(d, d, generator=torch.Generator().manual_seed(0))
    mapped = _with_map(tiny_adapter, tmp_path / "mapped", A)
    plain = InfoNCEEmbedder(tiny_model, adapter=str(tiny_adapter), max_length=32)
    emb = InfoNCEEmbedder(tiny_model, adapter=str(mapped), max_length=32)
    torch.testing.assert_close(emb.aligned_head, tiny_model.lm_head.float() @ A)
    assert plain.aligned_head is tiny_model.lm_head
    # the dense vectors, the adapter's hash and the cache key are the plain adapter's
    np.testing.assert_array_equal(emb.encode_documents(TINY_CORPUS), plain.encode_documents(TINY_CORPUS))
    fp, fp_plain = emb.fingerprint(), plain.fingerprint()
    assert fp.pop("sparse_map_sha256") and fp == fp_plain
    assert dense_fingerprint(emb) == dense_fingerprint(plain) == fp_plain
    # the aligned tokens are E_g·A·h_adj
    enc = Encoder.from_embedder(emb, tiny_model, SparseConfig(doc_k=8, pc1_remove=None))
    H = emb.encode_documents(TINY_CORPUS)
    want = Sparsifier(tiny_model.lm_head.float() @ A, np.asarray(tiny_model.special_ids),
                      enc.sparsifier.term_map, enc.config).documents(H)
    assert (enc.sparse_documents(H) != want).nnz == 0
    plain_enc = Encoder.from_embedder(plain, tiny_model, SparseConfig(doc_k=8, pc1_remove=None))
    assert (plain_enc.sparse_documents(H) != want).nnz > 0


def test_a_map_of_the_wrong_shape_is_refused(tiny_adapter, tiny_model, tmp_path):
    from alignir.encoders.embedders.infonce import InfoNCEEmbedder

    d = int(tiny_model.lm_head.shape[1])
    bad = _with_map(tiny_adapter, tmp_path / "bad", torch.eye(d + 1))
    with pytest.raises(InvalidInputError, match="hidden"):
        InfoNCEEmbedder(tiny_model, adapter=str(bad), max_length=32)


def test_lora_training_from_an_adapter_with_a_map_says_the_map_stays_behind(tiny_adapter, tiny_model, data_files,
                                                                             tmp_path, caplog):
    from alignir.encoders.embedders.adapters import SPARSE_MAP_FILE
    from alignir.encoders.train.trainer import train
    from conftest import train_config

    d = int(tiny_model.lm_head.shape[1])
    mapped = _with_map(tiny_adapter, tmp_path / "mapped", torch.eye(d))
    with caplog.at_level("WARNING", logger="alignir.encoders.train.trainer"):
        summary = train(train_config(tmp_path, "infonce", "contrastive", data_files["pairs"], steps=1,
                                     init_adapter=str(mapped)), loaded=tiny_model)
    assert any("aligned-token map" in r.getMessage() for r in caplog.records)
    assert not (tmp_path / "infonce-contrastive" / SPARSE_MAP_FILE).exists(), summary


@pytest.fixture
def tiny_train_beir(tmp_path):
    d = tmp_path / "beir"
    (d / "qrels").mkdir(parents=True)
    with open(d / "corpus.jsonl", "w") as fh:
        for i, t in enumerate(TINY_CORPUS):
            fh.write(json.dumps({"_id": f"d{i}", "title": t.split()[1], "text": t}) + "\n")
    with open(d / "queries.jsonl", "w") as fh:
        for i, q in enumerate(TRAIN_QUERIES):
            fh.write(json.dumps({"_id": f"q{i}", "text": q}) + "\n")
    (d / "qrels" / "train.tsv").write_text("query-id\tcorpus-id\tscore\n" +
                                           "".join(f"q{i}\td{i}\t1\n" for i in range(6)))
    return d


@pytest.mark.e2e  # a map fitted and an index built through the CLI
def test_cli_fits_a_map_and_an_index_built_with_it_records_it(tiny_adapter, tiny_folder, tiny_train_beir,
                                                             tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from alignir.encoders.embedders.adapters import SPARSE_MAP_FILE, SPARSE_MAP_META, adapter_hash
    from alignir.retrieval.cli import app
    from alignir.retrieval.searcher import Searcher

    monkeypatch.setenv("ALIGNIR_CACHE", str(tmp_path / "cache"))
    share_model_cache(tmp_path / "cache")  # the run's converted models and ONNX exports
    out = tmp_path / "mapped"
    args = ["train", "sparse-map", "--init-adapter", str(tiny_adapter), "--model", str(tiny_folder),
            "--data", str(tiny_train_beir), "--out", str(out), "--steps", "4", "--set", "batch_size=3",
            "--set", "held_out=0.34", "--set", "random_negatives=4", "--eval-every", "2",
            "--corpus", str(tiny_train_beir), "--set", "breadth=0.5"]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    record = json.loads((out / SPARSE_MAP_META).read_text())
    assert record["train_queries"] == 4 and record["held_out_queries"] == 2
    assert set(record["held_out_ndcg@10"]) == {"before", "after"}
    assert (out / SPARSE_MAP_FILE).is_file() and adapter_hash(out) == adapter_hash(tiny_adapter)
    assert len((out / "sparse_map_log.jsonl").read_text().splitlines()) == 1 + 4
    # an unknown setting is named with the known ones; a map is never overwritten
    bad = CliRunner().invoke(app, args[:-2] + ["--set", "tau=2"])
    assert bad.exit_code != 0 and "tau" in bad.output and "function_weight" in bad.output
    again = CliRunner().invoke(app, args)
    assert again.exit_code != 0 and "already holds a sparse map" in again.output
    idx = tmp_path / "idx"
    res = CliRunner().invoke(app, ["build-index", str(tiny_train_beir / "corpus.jsonl"), "--index", str(idx), "--model",
                                   str(tiny_folder), "--embedder", "infonce", "--adapter", str(out),
                                   "--max-length", "32"])
    assert res.exit_code == 0, res.output
    from safetensors.torch import load_file

    from alignir.index.reader import open_index

    assert open_index(idx, verify=False, parts=()).fingerprint["sparse_map_sha256"]
    A = load_file(str(out / SPARSE_MAP_FILE))["sparse_map"]
    with Searcher.open(idx) as s:
        assert s.search("supersonic wind tunnel", k=3, mode="sparse")
        torch.testing.assert_close(s.sparsifier.lm_head.float(), s.embedder.lm_head.float() @ A)


def test_fitting_from_an_adapter_with_a_map_replaces_it(tiny_adapter, tiny_folder, tiny_train_beir, tiny_model,
                                                         tmp_path):
    from safetensors.torch import load_file

    from alignir.encoders.embedders.adapters import SPARSE_MAP_FILE
    from alignir.retrieval.sparse_map_fit import fit_sparse_map

    d = int(tiny_model.lm_head.shape[1])
    old = torch.eye(d) + 0.5 * torch.randn(d, d, generator=torch.Generator().manual_seed(4))
    mapped = _with_map(tiny_adapter, tmp_path / "mapped", old)
    cfg = SparseMapConfig(steps=3, batch_size=3, random_negatives=4)
    kw = dict(model=str(tiny_folder), family="infonce", split="train", held_out=0.34, config=cfg,
              cache_dir=tmp_path / "cache", progress=False, max_length=32)
    plain = fit_sparse_map(tiny_train_beir, tmp_path / "from-plain", adapter=str(tiny_adapter), **kw)
    again = fit_sparse_map(tiny_train_beir, tmp_path / "from-mapped", adapter=str(mapped), **kw)
    # the same start (E_g, the identity) and the same steps: the old map is neither kept nor compounded
    assert again["held_out_ndcg@10"] == plain["held_out_ndcg@10"]
    torch.testing.assert_close(load_file(str(tmp_path / "from-mapped" / SPARSE_MAP_FILE))["sparse_map"],
                               load_file(str(tmp_path / "from-plain" / SPARSE_MAP_FILE))["sparse_map"])


def test_logit_shift_penalty_is_the_mean_squared_change_of_the_reference_logits():
    from alignir.encoders.train.sparse_map import logit_shift_penalty

    W, q, docs, _ = _toy(seed=5)
    A = torch.eye(5) + 0.3 * torch.randn(5, 5, generator=torch.Generator().manual_seed(6))
    want = ((docs @ (A - torch.eye(5)).T @ W.T) ** 2).sum(1).mean()
    got = logit_shift_penalty(A, W.T @ W, docs.T @ docs / docs.shape[0])
    assert float(got) == pytest.approx(float(want), rel=1e-5)


def test_the_function_penalty_keeps_the_reference_logits_closer():
    from alignir.encoders.train.sparse_map import logit_shift_penalty

    W, q, docs, surface = _toy(seed=7)
    ex = MapExamples("toy", q, docs, surface, [[i] for i in range(6)])
    reference = torch.randn(30, 5, generator=torch.Generator().manual_seed(8))
    gram, moment = W.T @ W, reference.T @ reference / 30
    base = dict(steps=40, lr=0.05, batch_size=6, identity_weight=0.0, doc_k=6, query_m=3)
    free, _ = train_sparse_map([ex], W, None, SparseMapConfig(**base))
    held, _ = train_sparse_map([ex], W, None, SparseMapConfig(**base, function_weight=1.0), reference=reference)
    assert logit_shift_penalty(held, gram, moment) < 0.5 * logit_shift_penalty(free, gram, moment)
    with pytest.raises(InvalidInputError, match="reference"):
        train_sparse_map([ex], W, None, SparseMapConfig(**base, function_weight=1.0))


def test_the_transfer_measure_is_the_sparse_leg_of_an_index_over_the_held_out_pairs(tiny_adapter, tiny_folder,
                                                                                     tiny_train_beir, tmp_path):
    """The fit's title→text transfer nDCG@10, before and after, is what the aligned-token leg of
    an encoder fitted on those texts scores, through the plain adapter and through the map."""
    from alignir.retrieval.encoder import Encoder
    from alignir.retrieval.metrics import evaluate
    from alignir.retrieval.sparse_map_fit import _pair_rows, fit_sparse_map

    cfg = SparseMapConfig(steps=6, lr=0.05, batch_size=3, random_negatives=4, function_weight=1e-3)
    kw = dict(model=str(tiny_folder), family="infonce", max_length=32, cache_dir=tmp_path / "cache")
    record = fit_sparse_map(tiny_train_beir, tmp_path / "mapped", adapter=str(tiny_adapter), split="train",
                            corpora=[tiny_train_beir], pairs_per_corpus=2, transfer_pairs=4, held_out=0.34,
                            config=cfg, progress=False, **kw)
    transfer = record["transfer_ndcg@10"]
    assert transfer["pairs_per_corpus"] == 4

    rows = _pair_rows(tiny_train_beir / "corpus.jsonl", 4, cfg.seed, skip=2)
    assert len(rows) == 4 and not set(rows) & set(_pair_rows(tiny_train_beir / "corpus.jsonl", 2, cfg.seed))
    titles, texts = [r[0] for r in rows], [r[1] for r in rows]
    qrels = {str(i): {str(i): 1} for i in range(4)}
    for when, adapter in (("before", tiny_adapter), ("after", tmp_path / "mapped")):
        enc = Encoder.from_pretrained(str(tiny_folder), adapter=str(adapter), family="infonce", max_length=32,
                                      cache_dir=tmp_path / "cache").fit(texts)
        S = (enc.sparse_queries(enc.dense(titles, "query"), titles) @ enc.sparse_documents(
            enc.dense(texts, "document")).T).toarray()
        run = {str(i): {str(j): float(S[i, j]) for j in range(4)} for i in range(4)}
        want = evaluate(qrels, run, ("ndcg@10",))["ndcg@10"]
        assert transfer[when]["beir"] == pytest.approx(want, abs=1e-4), when
        assert transfer[when]["mean"] == transfer[when]["beir"]
    with pytest.raises(InvalidInputError, match="too few"):
        fit_sparse_map(tiny_train_beir, tmp_path / "again", adapter=str(tiny_adapter), split="train",
                       corpora=[tiny_train_beir], pairs_per_corpus=6, transfer_pairs=4, held_out=0.34,
                       config=cfg, progress=False, **kw)
    with pytest.raises(InvalidInputError, match="transfer_pairs"):
        fit_sparse_map(tiny_train_beir, tmp_path / "again", adapter=str(tiny_adapter), split="train",
                       transfer_pairs=4, held_out=0.34, config=SparseMapConfig(steps=1), progress=False, **kw)
