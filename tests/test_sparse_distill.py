"""Distillation of the model's own dense in-batch scores into its aligned-token scores
(aligned_loss.sparse_distill_kl, InfoNCE `--set sparse_distill=w`): exact values on hand-sized
tensors, the gradient reaches only the sparse side, and the term enters the training loss."""
from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from alignir.encoders.train.aligned_loss import matched_temperature, sparse_distill_kl, sparse_info_nce
from alignir.encoders.train.losses import distill_kl, soft_label_kl
from alignir.encoders.train.trainer import train

from conftest import train_config, train_losses

pytestmark = pytest.mark.usefixtures("one_thread")


def test_value_by_hand():
    # dense row 0: softmax([0, ln 3]) = [1/4, 3/4]; sparse [0, 0] -> [1/2, 1/2]
    # dense row 1: softmax([ln 2, 0]) = [2/3, 1/3]; sparse [2, 0] / τ=2 -> softmax([1, 0])
    dense = torch.tensor([[0.0, math.log(3.0)], [math.log(2.0), 0.0]])
    sparse = torch.tensor([[0.0, 0.0], [2.0, 0.0]])
    p1 = 1 / (1 + math.exp(-1.0))
    row0 = 0.25 * math.log(0.25 / 0.5) + 0.75 * math.log(0.75 / 0.5)
    row1 = (2 / 3) * math.log((2 / 3) / p1) + (1 / 3) * math.log((1 / 3) / (1 - p1))
    got = sparse_distill_kl(dense, sparse, tau=2.0)
    # row 0 at τ=2 is still uniform on the sparse side
    assert float(got) == pytest.approx((row0 + row1) / 2, abs=1e-6)


def test_candidates_drop_masked_documents():
    # the masked third column counts on neither side: row = KL([1/4, 3/4] || [1/2, 1/2])
    dense = torch.tensor([[0.0, math.log(3.0), 50.0]])
    sparse = torch.tensor([[1.0, 1.0, -40.0]])
    cand = torch.tensor([[True, True, False]])
    want = 0.25 * math.log(0.5) + 0.75 * math.log(1.5)
    assert float(sparse_distill_kl(dense, sparse, 1.0, cand)) == pytest.approx(want, abs=1e-6)
    assert float(sparse_distill_kl(dense, sparse, 1.0)) > want + 1.0  # unmasked, the third column dominates


def test_gradient_reaches_only_the_sparse_scores():
    dense = torch.tensor([[0.0, math.log(3.0)]], requires_grad=True)
    sparse = torch.tensor([[0.0, 0.0]], requires_grad=True)
    sparse_distill_kl(dense * 1.0, sparse, tau=4.0).backward()
    assert dense.grad is None or torch.count_nonzero(dense.grad) == 0
    # d KL / d s = (softmax(s/τ) - p_T) / τ, mean over one row
    torch.testing.assert_close(sparse.grad, torch.tensor([[(0.5 - 0.25) / 4, (0.5 - 0.75) / 4]]))


def test_zero_when_the_rankings_agree_and_bad_input():
    scores = torch.tensor([[3.0, 1.0, -2.0], [0.5, 0.0, 4.0]])
    assert float(sparse_distill_kl(scores / 10.0, scores, tau=10.0)) == pytest.approx(0.0, abs=1e-7)
    with pytest.raises(ValueError, match="tau"):
        sparse_distill_kl(scores, scores, tau=0.0)
    with pytest.raises(ValueError, match="one shape"):
        soft_label_kl(scores, scores[:, :2])


def test_matched_temperature_by_hand():
    # row 0: sparse [0, 200, 400] (std 163.3) vs dense [0, 1, 2] (std 0.8165): τ = 200
    # row 1 over its two candidates: sparse [10, 30] (std 10) vs dense [1, 3] (std 1): τ = 10
    scores = torch.tensor([[0.0, 200.0, 400.0], [10.0, 30.0, 999.0]])
    dense = torch.tensor([[0.0, 1.0, 2.0], [1.0, 3.0, -50.0]])
    cand = torch.tensor([[True, True, True], [True, True, False]])
    tau = matched_temperature(scores, dense, cand)
    torch.testing.assert_close(tau, torch.tensor([[200.0], [10.0]]))
    # at τ_q the sparse logits equal the dense ones here (both affine in one another), so the KL is 0
    assert float(sparse_distill_kl(dense, scores, tau, cand)) == pytest.approx(0.0, abs=1e-6)
    # scaling the sparse scores changes nothing at the matched temperature: only the ranking's shape counts
    s2 = scores * 7.0
    assert float(sparse_distill_kl(dense, s2, matched_temperature(s2, dense, cand), cand)) == pytest.approx(0.0, abs=1e-6)
    # a query whose sparse scores are all equal gets the floor, not a division by zero
    flat = matched_temperature(torch.zeros(1, 3), dense[:1])
    assert float(flat) == pytest.approx(1e-6) and torch.isfinite(torch.zeros(1, 3) / flat).all()


def test_matched_temperature_is_detached_and_per_query_tau_works_in_infonce():
    scores = torch.tensor([[4.0, 0.0, 2.0], [0.0, 9.0, 3.0]], requires_grad=True)
    dense = torch.tensor([[2.0, 0.0, 1.0], [0.0, 3.0, 1.0]])
    tau = matched_temperature(scores, dense)
    assert not tau.requires_grad
    torch.testing.assert_close(tau, torch.tensor([[2.0], [3.0]]))
    loss = sparse_info_nce(scores, torch.tensor([0, 1]), tau)
    want = torch.nn.functional.cross_entropy(dense, torch.tensor([0, 1]))  # scores / τ_q == dense here
    torch.testing.assert_close(loss, want)
    loss.backward()
    assert scores.grad is not None
    with pytest.raises(ValueError, match="tau"):
        sparse_info_nce(scores, torch.tensor([0, 1]), torch.tensor([[1.0], [0.0]]))
    with pytest.raises(ValueError, match="candidates"):
        matched_temperature(scores, dense, torch.ones(2, 2, dtype=torch.bool))


def test_distill_kl_is_the_same_kl_over_cosines():
    g = torch.Generator().manual_seed(0)
    q, d, tq, td = (torch.randn(n, 5, generator=g) for n in (3, 7, 3, 7))
    cand = torch.ones(3, 7, dtype=torch.bool)
    cand[0, 4] = False
    cos = lambda a, b: torch.nn.functional.normalize(a, dim=-1) @ torch.nn.functional.normalize(b, dim=-1).T  # noqa: E731
    want = soft_label_kl(cos(q, d) / 0.05, cos(tq, td) / 0.1, cand)
    torch.testing.assert_close(distill_kl(q, d, tq, td, 0.05, 0.1, cand), want)
    p_t = torch.softmax((cos(tq, td) / 0.1).masked_fill(~cand, float("-inf")), 1)
    log_s = torch.log_softmax((cos(q, d) / 0.05).masked_fill(~cand, float("-inf")), 1)
    by_hand = torch.nansum(p_t * (torch.log(p_t) - log_s), 1).mean()
    torch.testing.assert_close(want, by_hand)


def test_infonce_with_sparse_distillation_logs_the_term(tiny_model, data_files, tmp_path):
    """`--set sparse_distill=w`: loss = InfoNCE + w·KL(dense || sparse) per step; it trains, checkpoints
    its hp, and a negative weight is refused."""
    cfg = train_config(tmp_path, "infonce", "contrastive", data_files["pairs"], steps=3,
                       hp={"sparse_distill": 0.7})
    summary = train(cfg, loaded=tiny_model)
    rows = [json.loads(line) for line in open(Path(summary["out"]) / "loss_log.jsonl")]
    rows = [r for r in rows if "sparse_distill" in r]
    assert len(rows) == 3
    for r in rows:
        assert r["sparse_distill"] > 0 and "sparse" not in r
        assert r["loss"] == pytest.approx(r["infonce"] + 0.7 * r["sparse_distill"], rel=1e-5)
    meta = json.loads((Path(summary["out"]) / "alignir_train.json").read_text())
    assert meta["hp"]["sparse_distill"] == 0.7
    with pytest.raises(ValueError, match=r"flops_q >= 0 .*'sparse_distill': -1\.0"):
        train(dataclasses.replace(cfg, out=str(tmp_path / "bad"), hp={"sparse_distill": -1.0}), loaded=tiny_model)
    with pytest.raises(ValueError, match="sparse_tau > 0 or 'auto'"):
        train(dataclasses.replace(cfg, out=str(tmp_path / "bad2"), hp={"sparse_distill": 1.0, "sparse_tau": "hot"}),
              loaded=tiny_model)


def test_infonce_with_the_matched_sparse_temperature(tiny_model, data_files, tmp_path):
    """`--set sparse_tau=auto`: the same run at the per-query matched temperature logs a different
    sparse_distill than at the fixed default, and records the setting."""
    losses = {}
    for tau in ("auto", 10.0):
        hp = {"sparse_distill": 0.7, "sparse": 0.3, "sparse_tau": tau}
        cfg = train_config(tmp_path / str(tau), "infonce", "contrastive", data_files["pairs"], steps=2, hp=hp)
        out = Path(train(cfg, loaded=tiny_model)["out"])
        rows = [json.loads(line) for line in open(out / "loss_log.jsonl") if "sparse_distill" in line]
        assert len(rows) == 2 and all(np.isfinite(r["sparse_distill"]) and np.isfinite(r["sparse"]) for r in rows)
        for r in rows:
            assert r["loss"] == pytest.approx(r["infonce"] + 0.7 * r["sparse_distill"] + 0.3 * r["sparse"], rel=1e-5)
        losses[tau] = rows[0]["sparse_distill"]
        assert json.loads((out / "alignir_train.json").read_text())["hp"]["sparse_tau"] == tau
    assert losses["auto"] != pytest.approx(losses[10.0], rel=1e-3)


def test_a_paused_run_with_both_distillations_resumes_exactly(tiny_model, tiny_bert, data_files, tmp_path):
    """InfoNCE + teacher distillation through the disk cache + sparse_distill, paused after every
    step and resumed (as a killed background run is): the same losses and final adapter as one run."""
    hp = {"teacher": str(tiny_bert), "distill": 1.0, "sparse_distill": 1.0,
          "teacher_cache": str(tmp_path / "cache")}
    full = train(train_config(tmp_path / "a", "infonce", "contrastive", data_files["pairs"], steps=3, hp=hp),
                 loaded=tiny_model)
    cfg = train_config(tmp_path / "b", "infonce", "contrastive", data_files["pairs"], steps=3, hp=hp, stop_after=1)
    for _ in range(2):
        assert train(cfg, loaded=tiny_model).get("interrupted")
    done = train(cfg, loaded=tiny_model)
    np.testing.assert_allclose(train_losses(done["out"]), train_losses(full["out"]), rtol=1e-5, atol=1e-6)
    meta = [json.loads((tmp_path / x / "infonce-contrastive" / "alignir_train.json").read_text()) for x in "ab"]
    assert meta[0]["final_weights_sha256"] == meta[1]["final_weights_sha256"]
