"""Training dynamics on a tiny Llama that has first been trained as a language model on the tiny
corpus, so that the frozen decoder of AutoRegEmbed / LLM2Comp is a real LM (a random tiny model
predicts a near-uniform distribution, and every generative loss starts at log|V| and can hardly
move, which hides sign and wiring bugs).

- every method/stage overfits one fixed batch: the loss falls at nearly every step and by a clear
  margin (a flipped sign, a detached soft token or a trained "frozen" decoder fails this);
- GIRCSE with the KV cache has the same gradients as Algorithm 1 without it;
- the AutoRegEmbed reference p_ref (eq.2) stays frozen, shares no storage with the trained
  model and keeps the weights the CDA stage started from;
- the held-out loss does not perturb training; CTKD is eq.5 (the KL alone) unless asked.
"""
from __future__ import annotations

import copy
import functools

import numpy as np
import pytest
import torch

from alignir.encoders.train.trainer import train

from conftest import TINY_CORPUS, TRAIN_CASE_IDS, TRAIN_CASES, train_config, train_log, train_losses

pytestmark = pytest.mark.usefixtures("one_thread")

_cfg = functools.partial(train_config, steps=5, resume=False)


@pytest.fixture(scope="module")
def tiny_lm(tiny_model):
    """The tiny Llama trained (all weights, seeded) as a causal LM on TINY_CORPUS."""
    from alignir.encoders.models import wrap_model

    torch.manual_seed(0)
    m = copy.deepcopy(tiny_model.model).train()
    tok = tiny_model.tokenizer
    enc = tok(TINY_CORPUS, padding=True, return_tensors="pt", add_special_tokens=False)
    labels = enc["input_ids"].masked_fill(enc["attention_mask"] == 0, -100)
    opt = torch.optim.Adam(m.parameters(), lr=2e-2)
    for _ in range(30):
        loss = m(**enc, labels=labels).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert float(loss) < 1.0, float(loss)  # it really is a language model of the corpus now
    m.eval()
    return wrap_model("tiny-lm", tok, m, {"name": "tiny-lm", "source": "tiny-llama trained on TINY_CORPUS", "seed": 0}, "cpu")


@pytest.mark.parametrize("method,stage,kind,hp", TRAIN_CASES, ids=TRAIN_CASE_IDS)
def test_fixed_batch_loss_falls_steadily(method, stage, kind, hp, tiny_lm, data_files, tmp_path):
    """batch_size = the whole data set: every step sees the same batch, so the loss must fall."""
    if stage == "ucl":  # new dropout views every step: the loss is noisy from step to step, so judge its trend
        summary = train(_cfg(tmp_path, method, stage, data_files[kind], hp=hp, steps=12), loaded=tiny_lm)
        losses = np.array(train_losses(summary["out"]))
        assert np.all(np.isfinite(losses)) and losses[-4:].mean() < 0.25 * losses[:4].mean(), losses
        return
    summary = train(_cfg(tmp_path, method, stage, data_files[kind], hp=hp), loaded=tiny_lm)
    losses = np.array(train_losses(summary["out"]))
    assert np.all(np.isfinite(losses))
    rises = np.diff(losses) > 0.02 * losses[0]
    assert not rises.any(), losses
    # the App. B divergence variant squashes small divergences (σ(x) ≈ 1/2): it moves more slowly
    assert losses[-1] < (0.95 if hp.get("divergence") else 0.85) * losses[0], losses


def test_gircse_kv_cache_gradients_equal_algorithm1(tiny_lm):
    """Training runs the K generation steps with the KV cache; its gradients must be those of
    Algorithm 1 re-running f_θ([X; D]) at every step (GIRCSE Alg.1, App. D)."""
    from alignir.encoders.embedders.gircse import generate_soft_tokens, gircse_input_ids
    from alignir.encoders.train.adapter import add_lora
    from alignir.encoders.embedders.generative import left_pad, pad_id

    torch.manual_seed(0)
    m = add_lora(copy.deepcopy(tiny_lm.model), 4, 8).train()
    for n, p in m.named_parameters():
        if "lora_B" in n:  # a non-zero adapter, so LoRA A gets gradients too
            torch.nn.init.normal_(p, std=0.1)
    rows = [gircse_input_ids(tiny_lm.tokenizer, t, None, 32) for t in TINY_CORPUS[:4]]
    ids, mask = left_pad(rows, pad_id(tiny_lm.tokenizer))
    grads = []
    for use_cache in (True, False):
        m.zero_grad()
        G = generate_soft_tokens(m, ids, mask, 4, use_cache=use_cache)
        (G.pow(2).sum(-1).mean() + G[:, -1].sum()).backward()
        grads.append({n: p.grad.clone() for n, p in m.named_parameters() if p.grad is not None})
    assert grads[0].keys() == grads[1].keys() and len(grads[0]) > 0
    for n in grads[0]:
        g0, g1 = grads[0][n], grads[1][n]
        assert (g0 - g1).abs().max() <= 1e-4 * (1 + g1.abs().max()), (n, float((g0 - g1).abs().max()), float(g1.abs().max()))


def test_cda_reference_is_frozen_distinct_and_unchanged(tiny_lm, data_files, tmp_path):
    from safetensors.torch import load_file

    ic = train(_cfg(tmp_path, "autoregembed", "ic", data_files["pairs"], steps=3, hp={"k": 2}), loaded=tiny_lm)
    cda = train(_cfg(tmp_path, "autoregembed", "cda", data_files["pairs"], steps=3, init_adapter=ic["out"],
                     hp={"k": 2}), loaded=tiny_lm, return_method=True)
    m = cda["method_obj"]
    # frozen: peft's disable_adapter() (the frozen decoder D) used to switch requires_grad back on
    assert not any(p.requires_grad for p in m.ref.parameters())
    trained = {p.data_ptr() for p in m.model.parameters()} | {m.soft.data_ptr()}
    assert not any(p.data_ptr() in trained for p in m.ref.parameters())
    assert m.ref_soft.data_ptr() not in trained
    # unchanged: p_ref keeps the IC adapter; the trained model moved away from it
    ic_w = load_file(f"{ic['out']}/adapter_model.safetensors")
    ref_sd = {k.replace(".default", ""): v for k, v in m.ref.state_dict().items() if "lora_" in k}
    now_sd = {k.replace(".default", ""): v for k, v in m.model.state_dict().items() if "lora_" in k}
    assert ic_w.keys() == ref_sd.keys()
    assert all(torch.equal(ic_w[k], ref_sd[k]) for k in ic_w)
    assert any(not torch.equal(ic_w[k], now_sd[k]) for k in ic_w)


def test_heldout_loss_is_logged_and_leaves_training_untouched(tiny_lm, data_files, tmp_path):
    kw = dict(steps=4, batch_size=2, eval_examples=2, hp={"dropout": 0.2})  # UCL: dropout uses the RNG
    a = train(_cfg(tmp_path / "a", "llm2comp", "ucl", data_files["texts"], eval_every=0, **kw), loaded=tiny_lm)
    b = train(_cfg(tmp_path / "b", "llm2comp", "ucl", data_files["texts"], eval_every=1, **kw), loaded=tiny_lm)
    la, lb = train_losses(a["out"]), train_losses(b["out"])
    np.testing.assert_allclose(la, lb, rtol=1e-6, atol=1e-7)
    assert [r["step"] for r in train_log(a["out"], "eval_log.jsonl")] == [0, 4]
    ev = train_log(b["out"], "eval_log.jsonl")
    assert [r["step"] for r in ev] == [0, 1, 2, 3, 4]
    assert a["heldout"]["n"] == 2 and a["heldout"]["first"]["loss"] == pytest.approx(ev[0]["loss"])
    with pytest.raises(ValueError, match="eval_examples"):
        train(_cfg(tmp_path / "c", "llm2comp", "ucl", data_files["texts"], eval_examples=6), loaded=tiny_lm)


def test_ctkd_is_eq5_kl_unless_nll_is_asked_for(tiny_lm, data_files, tmp_path):
    kl_only = train_log(train(_cfg(tmp_path / "a", "llm2comp", "ctkd", data_files["texts"], steps=1), loaded=tiny_lm)["out"])[0]
    assert kl_only["loss"] == pytest.approx(kl_only["kl"]) and kl_only["nll"] > 0
    both = train_log(train(_cfg(tmp_path / "b", "llm2comp", "ctkd", data_files["texts"], steps=1, hp={"nll_weight": 1.0}),
                      loaded=tiny_lm)["out"])[0]
    assert both["loss"] == pytest.approx(both["kl"] + both["nll"])
