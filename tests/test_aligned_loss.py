"""The differentiable aligned-token score (encoders.train.aligned_loss) equals the index's sparse
leg score (retrieval.sparsify, the product path) on the tiny model, passes gradients to both
sides, the InfoNCE `--set sparse=λ` term enters the training loss exactly, and so do the FLOPS
regularisers of its weights (`--set flops_d=a --set flops_q=b`)."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from alignir.encoders.embedders import get_embedder
from alignir.encoders.train.aligned_loss import (AlignedScoreConfig, aligned_scores, aligned_weights, batch_pc1, flops_penalty,
                                                 sparse_info_nce)
from alignir.encoders.train.trainer import train
from alignir.retrieval.config import SparseConfig
from alignir.retrieval.sparsify import Sparsifier, fit_corpus_pc1, resolve_lambda

from conftest import TINY_CORPUS, TRAIN_QUERIES, train_config

pytestmark = pytest.mark.usefixtures("one_thread")


def _vectors(tiny_model):
    emb = get_embedder("prompteol", tiny_model, max_length=64, progress=False)
    queries = TRAIN_QUERIES[:4]
    docs = TINY_CORPUS[:6]
    return emb, queries, emb.encode_queries(queries), emb.encode_documents(docs)


def test_defaults_are_the_index_defaults():
    ours, index = AlignedScoreConfig(), SparseConfig()
    assert (ours.doc_k, ours.query_m, ours.pc1_remove) == (index.doc_k, index.query_m, index.pc1_remove)
    assert (index.doc_weighting, index.query_weighting, index.fold) == ("log1p", "raw", False)


@pytest.mark.parametrize("doc_k,query_m,pc1_remove", [(20, 5, 0.75), (256, 50, 0.75), (200, 0, None), (30, 8, 1.0)])
def test_scores_equal_the_index_sparse_leg(tiny_model, doc_k, query_m, pc1_remove):
    emb, queries, Hq, Hd = _vectors(tiny_model)
    surface = emb.surface_token_ids(queries)
    config = SparseConfig(doc_k=doc_k, query_m=query_m, pc1_remove=pc1_remove)
    pc1 = fit_corpus_pc1(Hd)
    config = resolve_lambda(config, Hd, pc1)
    sp = Sparsifier.for_model(tiny_model, config, pc1)
    want = (sp.queries(Hq, surface) @ sp.documents(Hd).T).toarray()
    got = aligned_scores(torch.from_numpy(Hq), torch.from_numpy(Hd), tiny_model.lm_head, surface,
                         tiny_model.special_ids, AlignedScoreConfig(doc_k, query_m, pc1_remove))
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-4, atol=1e-4)
    assert np.abs(want).max() > 0


def test_batch_pc1_is_the_index_u1(tiny_model):
    _, _, _, Hd = _vectors(tiny_model)
    np.testing.assert_allclose(batch_pc1(torch.from_numpy(Hd)).numpy(), fit_corpus_pc1(Hd), atol=1e-5)


def test_gradients_reach_queries_and_documents(tiny_model):
    emb, queries, Hq, Hd = _vectors(tiny_model)
    hq = torch.from_numpy(Hq).requires_grad_()
    hd = torch.from_numpy(Hd).requires_grad_()
    scores = aligned_scores(hq, hd, tiny_model.lm_head, emb.surface_token_ids(queries), tiny_model.special_ids,
                            AlignedScoreConfig(20, 5, 0.75))
    loss = sparse_info_nce(scores, torch.arange(len(queries)), 10.0)
    # hand-computed: mean_i (logsumexp_j s_ij/τ − s_ii/τ)
    s = scores.detach().double() / 10.0
    want = (torch.logsumexp(s, 1) - s.diagonal()).mean()
    assert float(loss) == pytest.approx(float(want), rel=1e-6)
    loss.backward()
    assert hq.grad.abs().sum() > 0 and hd.grad.abs().sum() > 0
    with pytest.raises(ValueError, match="tau"):
        sparse_info_nce(scores, torch.arange(len(queries)), 0.0)
    with pytest.raises(ValueError, match="surface"):
        aligned_scores(hq, hd, tiny_model.lm_head, [], tiny_model.special_ids)


def test_infonce_with_the_sparse_term_logs_both(tiny_model, data_files, tmp_path):
    """`--set sparse=λ`: the loss is InfoNCE + λ·sparse InfoNCE on the batch; it trains and saves its hp."""
    cfg = train_config(tmp_path, "infonce", "contrastive", data_files["pairs"], steps=4, hp={"sparse": 0.5})
    summary = train(cfg, loaded=tiny_model)
    rows = [json.loads(line) for line in open(Path(summary["out"]) / "loss_log.jsonl")]
    rows = [r for r in rows if "sparse" in r]
    assert len(rows) == 4
    for r in rows:
        assert r["sparse"] > 0 and r["loss"] == pytest.approx(r["infonce"] + 0.5 * r["sparse"], rel=1e-5)
    meta = json.loads((Path(summary["out"]) / "alignir_train.json").read_text())
    assert meta["hp"]["sparse"] == 0.5 and meta["hp"]["sparse_tau"] == 10.0
    for bad in ({"sparse": -1.0}, {"sparse": 1.0, "sparse_tau": 0.0}):
        with pytest.raises(ValueError, match="aligned-token term"):
            train(dataclasses.replace(cfg, out=str(tmp_path / "bad"), hp=bad), loaded=tiny_model)


def test_flops_penalty_by_hand():
    # 3 texts over 4 tokens: token 0 carried by all three (mean |w| 2), token 1 by one (mean 1/3),
    # token 2 by two with opposite signs (|w| counts: mean 2/3), token 3 by none
    w = torch.tensor([[2.0, 0.0, 1.0, 0.0],
                      [2.0, 1.0, 0.0, 0.0],
                      [2.0, 0.0, -1.0, 0.0]])
    assert float(flops_penalty(w)) == pytest.approx(4.0 + 1 / 9 + 4 / 9)
    # spreading the same total weight over tokens nobody else carries costs less
    spread = torch.tensor([[2.0, 0.0, 0.0], [0.0, 2.0, 0.0], [0.0, 0.0, 2.0]])
    shared = torch.tensor([[2.0, 0.0, 0.0], [2.0, 0.0, 0.0], [2.0, 0.0, 0.0]])
    assert float(flops_penalty(spread)) == pytest.approx(3 * (2 / 3) ** 2)
    assert float(flops_penalty(shared)) == pytest.approx(4.0)
    x = w.clone().requires_grad_(True)
    flops_penalty(x).backward()  # ∂/∂w_it = 2·mean_t·sign(w_it)/n
    torch.testing.assert_close(x.grad[:, 0], torch.full((3,), 2 * 2.0 / 3))
    with pytest.raises(ValueError, match=r"\[n, V\]"):
        flops_penalty(torch.zeros(0, 4))


def test_aligned_weights_are_the_scores_factors(tiny_model):
    g = torch.Generator().manual_seed(1)
    d = tiny_model.lm_head.shape[1]
    hq, hd = torch.randn(2, d, generator=g), torch.randn(3, d, generator=g)
    surface = [np.array([5, 7]), np.array([9])]
    qw, dw = aligned_weights(hq, hd, tiny_model.lm_head, surface, tiny_model.special_ids)
    torch.testing.assert_close(qw @ dw.T, aligned_scores(hq, hd, tiny_model.lm_head, surface, tiny_model.special_ids))
    assert (dw >= 0).all() and int((dw > 0).sum(1).max()) <= AlignedScoreConfig().doc_k
    assert bool((qw[0, [5, 7]] != 0).all()) and bool((qw[1, 9] != 0))


def test_infonce_with_flops_terms(tiny_model, data_files, tmp_path):
    """`--set flops_d=a --set flops_q=b`: loss = InfoNCE + a·FLOPS(documents) + b·FLOPS(queries)."""
    cfg = train_config(tmp_path, "infonce", "contrastive", data_files["pairs"], steps=2,
                       hp={"flops_d": 0.3, "flops_q": 0.02})
    out = Path(train(cfg, loaded=tiny_model)["out"])
    rows = [json.loads(line) for line in open(out / "loss_log.jsonl") if "flops_d" in line]
    assert len(rows) == 2
    for r in rows:
        assert r["flops_d"] > 0 and r["flops_q"] > 0
        assert r["loss"] == pytest.approx(r["infonce"] + 0.3 * r["flops_d"] + 0.02 * r["flops_q"], rel=1e-5)
