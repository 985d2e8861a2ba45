"""Each training loss against a value worked out by hand with plain math on tiny tensors."""
from __future__ import annotations

import math

import pytest
import torch

from alignir.encoders.train.losses import (cda_divergence_loss, cda_loss, ctkd_kl, distill_kl, gircse_loss, icr_regulariser,
                                           info_nce,
                                           own_candidates, sequence_nll, simcse_loss, stepwise_contrastive,
                                           token_divergence)

t = torch.tensor
R2 = 1 / math.sqrt(2)


def sig(x: float) -> float:
    return 1 / (1 + math.exp(-x))


def ce(logits: list[float], target: int) -> float:
    """-log softmax(logits)[target] by hand."""
    return -(logits[target] - math.log(sum(math.exp(v) for v in logits)))


def test_info_nce_single_query():
    # cos(q, d0) = 1, cos(q, d1) = 0; tau = 0.5 -> logits (2, 0)
    loss = info_nce(t([[3.0, 0.0]]), t([[1.0, 0.0], [0.0, 5.0]]), t([0]), tau=0.5)
    assert float(loss) == pytest.approx(math.log(1 + math.exp(-2)), rel=1e-6)


def test_info_nce_in_batch_and_hard_negatives():
    q = t([[1.0, 0.0], [0.0, 2.0]])
    docs = t([[2.0, 0.0], [1.0, 1.0], [0.0, 1.0]])  # d0 = pos of q0, d2 = pos of q1, d1 = hard negative
    want = 0.5 * (ce([1, R2, 0], 0) + ce([0, R2, 1], 2))
    assert float(info_nce(q, docs, t([0, 2]), tau=1.0)) == pytest.approx(want, rel=1e-6)


def test_own_candidates_layout_of_pair_texts():
    # 3 queries with 1, 0, 2 negatives: docs = p0 p1 p2 | n0a | n2a n2b
    want = [[1, 0, 0, 1, 0, 0],
            [0, 1, 0, 0, 0, 0],
            [0, 0, 1, 0, 1, 1]]
    assert own_candidates([1, 0, 2]).int().tolist() == want


def test_info_nce_eq1_own_hard_negatives_only():
    """AutoRegEmbed eq.1 to the letter: each query's denominator is its positive and its own d_i^-."""
    q = t([[1.0, 0.0], [0.0, 1.0]])
    # p0=(1,0) p1=(1,1)/√2 | n0=(0,1) | n1=(-1,0)
    docs = t([[1.0, 0.0], [1.0, 1.0], [0.0, 3.0], [-2.0, 0.0]])
    tau = 0.5
    q0 = ce([1 / tau, 0 / tau], 0)           # q0: cos p0 = 1, cos n0 = 0  (p1 excluded)
    q1 = ce([R2 / tau, 0 / tau], 0)          # q1: cos p1 = 1/√2, cos n1 = 0  (p0, n0 excluded)
    got = info_nce(q, docs, t([0, 1]), tau, own_candidates([1, 1]))
    assert float(got) == pytest.approx((q0 + q1) / 2, rel=1e-6)
    # with in-batch negatives every document is in every denominator
    q0b = ce([2, 2 * R2, 0, -2], 0)
    q1b = ce([0, 2 * R2, 2, 0], 1)
    assert float(info_nce(q, docs, t([0, 1]), tau)) == pytest.approx((q0b + q1b) / 2, rel=1e-6)
    with pytest.raises(ValueError, match="positive must be among"):
        info_nce(q, docs, t([0, 2]), tau, own_candidates([1, 1]))
    with pytest.raises(ValueError, match="candidates must be"):
        info_nce(q, docs, t([0, 1]), tau, own_candidates([1, 0]))


def softmax(xs: list[float]) -> list[float]:
    z = sum(math.exp(v) for v in xs)
    return [math.exp(v) / z for v in xs]


def kl(p: list[float], q: list[float]) -> float:
    return sum(a * math.log(a / b) for a, b in zip(p, q) if a > 0)


def test_distill_kl_by_hand():
    """KL(teacher || student) of the softmax over each query's candidates, mean over queries."""
    q = t([[1.0, 0.0], [0.0, 2.0]])
    docs = t([[2.0, 0.0], [1.0, 1.0], [0.0, 1.0]])          # student cosines: q0 (1, R2, 0), q1 (0, R2, 1)
    tq = t([[0.0, 1.0], [1.0, 0.0]])
    tdocs = t([[1.0, 0.0], [0.0, 3.0], [1.0, 1.0]])         # teacher cosines: q0 (0, 1, R2), q1 (1, 0, R2)
    tau, ttau = 0.5, 0.25
    s0, s1 = softmax([1 / tau, R2 / tau, 0]), softmax([0, R2 / tau, 1 / tau])
    t0, t1 = softmax([0, 1 / ttau, R2 / ttau]), softmax([1 / ttau, 0, R2 / ttau])
    want = (kl(t0, s0) + kl(t1, s1)) / 2
    assert float(distill_kl(q, docs, tq, tdocs, tau, ttau)) == pytest.approx(want, rel=1e-5)
    # only the candidates count: q0 sees d0, d1; q1 sees d1, d2
    cand = t([[True, True, False], [False, True, True]])
    s0, s1 = softmax([1 / tau, R2 / tau]), softmax([R2 / tau, 1 / tau])
    t0, t1 = softmax([0, 1 / ttau]), softmax([0, R2 / ttau])
    want = (kl(t0, s0) + kl(t1, s1)) / 2
    assert float(distill_kl(q, docs, tq, tdocs, tau, ttau, cand)) == pytest.approx(want, rel=1e-5)
    # a student that scores like the teacher has nothing to learn
    assert float(distill_kl(tq, tdocs, tq * 3, tdocs, ttau, ttau)) == pytest.approx(0.0, abs=1e-6)
    with pytest.raises(ValueError, match="same batch"):
        distill_kl(q, docs, tq[:1], tdocs, tau, ttau)
    with pytest.raises(ValueError, match="temperatures"):
        distill_kl(q, docs, tq, tdocs, tau, 0.0)


def test_info_nce_rejects_bad_input():
    with pytest.raises(ValueError, match="tau"):
        info_nce(t([[1.0, 0.0]]), t([[1.0, 0.0]]), t([0]), tau=0)
    with pytest.raises(ValueError, match="docs"):
        info_nce(t([[1.0, 0.0]]), t([[1.0, 0.0, 0.0]]), t([0]))


@pytest.mark.parametrize("squash,f", [
    ("sigmoid", lambda x: -sig(x)),                 # eq.2
    ("logsigmoid", lambda x: -math.log(sig(x))),    # App. B
    ("tanh", lambda x: -math.tanh(x)),              # App. C
])
def test_cda_loss_eq2(squash, f):
    # log p(d+|e_q)=-10, log p(d+|e_d+)=-12, ref(d+|e_q)=-11, log p(d-|e_q)=-20, ref(d-|e_q)=-18
    tau, beta = 0.05, 0.1
    s1 = f(beta * abs(-10 - (-12)))                       # S1 = -σ(β|log p/p|) = -σ(0.2)
    s2 = f(beta * (-10 - (-11)) - beta * (-20 - (-18)))  # S2 = -σ(0.1·1 + 0.1·2) = -σ(0.3)
    want = ce([s1 / tau, s2 / tau], 0)
    got = cda_loss(t([-10.0]), t([-12.0]), t([-11.0]), t([[-20.0]]), t([[-18.0]]), tau, beta, squash)
    assert float(got) == pytest.approx(want, rel=1e-5)


def test_cda_loss_two_negatives_batch_mean():
    tau, beta = 0.1, 0.5
    # row 0: S1 = -σ(0.5·|-5+4|), S2 = -σ(0.5·0 - 0.5·(-7+8)), -σ(0.5·0 - 0.5·(-9+11))
    r0 = ce([-sig(0.5) / tau, -sig(-0.5) / tau, -sig(-1.0) / tau], 0)
    # row 1: S1 = -σ(0.5·3), S2 = -σ(0.5·2 - 0), -σ(0.5·2 - 0.5·4)
    r1 = ce([-sig(1.5) / tau, -sig(1.0) / tau, -sig(-1.0) / tau], 0)
    got = cda_loss(t([-5.0, -1.0]), t([-4.0, -4.0]), t([-5.0, -3.0]),
                   t([[-7.0, -9.0], [-6.0, -2.0]]), t([[-8.0, -11.0], [-6.0, -6.0]]), tau, beta)
    assert float(got) == pytest.approx(0.5 * (r0 + r1), rel=1e-5)


def test_cda_unknown_squash():
    with pytest.raises(ValueError, match="squash"):
        cda_loss(t([0.0]), t([0.0]), t([0.0]), t([[0.0]]), t([[0.0]]), squash="relu")


def test_cda_divergence_variant():
    tau = 0.1
    want = ce([-sig(0.5) / tau, -sig(1.0) / tau, -sig(2.0) / tau], 0)
    assert float(cda_divergence_loss(t([0.5]), t([[1.0, 2.0]]), tau)) == pytest.approx(want, rel=1e-5)


def test_token_divergence_kl_js_and_mask():
    p = t([[[math.log(0.5), math.log(0.5)], [0.0, 9.0]]])
    q = t([[[math.log(0.25), math.log(0.75)], [9.0, 0.0]]])
    mask = t([[1, 0]])  # the second position is padding and must not count
    kl = 0.5 * math.log(0.5 / 0.25) + 0.5 * math.log(0.5 / 0.75)
    m = (0.375, 0.625)
    js = 0.5 * (0.5 * math.log(0.5 / m[0]) + 0.5 * math.log(0.5 / m[1])) + \
        0.5 * (0.25 * math.log(0.25 / m[0]) + 0.75 * math.log(0.75 / m[1]))
    assert float(token_divergence(p, q, mask, "kl")[0]) == pytest.approx(kl, rel=1e-5)
    assert float(token_divergence(p, q, mask, "js")[0]) == pytest.approx(js, rel=1e-5)
    assert float(ctkd_kl(p, q, mask)) == pytest.approx(kl, rel=1e-5)


def test_sequence_nll_ignores_padding():
    lp = t([[-1.0, -2.0], [-3.0, -100.0]])
    assert float(sequence_nll(lp, t([[1, 1], [1, 0]]))) == pytest.approx(2.0)


def test_simcse_eq8():
    z1 = t([[1.0, 0.0], [0.0, 1.0]])
    z2 = t([[1.0, 0.0], [1.0, 1.0]])
    # views: v0=(1,0) v1=(0,1) v2=(1,0) v3=(1,1)/√2; positives 0<->2, 1<->3; self excluded
    rows = [
        ce([0, 1, R2], 1),        # v0 vs v1, v2, v3 -> target v2
        ce([0, 0, R2], 2),        # v1 vs v0, v2, v3 -> target v3
        ce([1, 0, R2], 0),        # v2 vs v0, v1, v3 -> target v0
        ce([R2, R2, R2], 1),      # v3 vs v0, v1, v2 -> target v1
    ]
    assert float(simcse_loss(z1, z2, tau=1.0)) == pytest.approx(sum(rows) / 4, rel=1e-5)


def test_stepwise_contrastive_eq7():
    Gq = t([[[1.0, 0.0], [-1.0, 2.0]]])                   # z_1 = (1,0), z_2 = (0,1)
    Gd = t([[[1.0, 0.0], [1.0, 0.0]], [[0.0, 1.0], [0.0, 3.0]]])  # d0: (1,0),(1,0); d1: (0,1),(0,2)
    Lk = stepwise_contrastive(Gq, Gd, t([0]), tau=1.0)
    assert Lk.tolist() == pytest.approx([ce([1, 0], 0), ce([0, 1], 0)], rel=1e-5)


def test_icr_regulariser_eq8_and_total():
    Lk = t([2.0, 1.0, 3.0])
    reg = (max(math.log(1) - math.log(2), 0) + max(math.log(3) - math.log(1), 0)) / 2
    assert float(icr_regulariser(Lk)) == pytest.approx(reg, rel=1e-6)
    total, contrast, r = gircse_loss(Lk, lam=0.5)
    assert float(contrast) == pytest.approx(6.0)
    assert float(total) == pytest.approx(6.0 + 0.5 * reg, rel=1e-6)
    assert float(icr_regulariser(t([1.5]))) == 0.0
    # reduction="mean": Σ_k L_k / K + λ L_reg; the reported contrast stays the eq.7 sum
    total_m, contrast_m, r_m = gircse_loss(Lk, lam=0.5, reduction="mean")
    assert float(total_m) == pytest.approx(6.0 / 3 + 0.5 * reg, rel=1e-6)
    assert float(contrast_m) == pytest.approx(6.0) and float(r_m) == pytest.approx(reg, rel=1e-6)
    with pytest.raises(ValueError, match="reduction"):
        gircse_loss(Lk, reduction="max")
    # monotone improvement is not penalised
    assert float(icr_regulariser(t([3.0, 2.0, 1.0]))) == 0.0
