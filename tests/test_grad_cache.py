"""Gradient caching of InfoNCE (`--set grad_cache=N`, encoders/train/grad_cache.py): the
gradient of a step equals the plain full-batch step's with every loss term, the logged loss is
the same, a run gives the same adapter, dropout masks are replayed, bad settings are refused."""
from __future__ import annotations

import copy
import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from alignir.encoders.train.adapter import add_lora
from alignir.encoders.train.base import pair_texts
from alignir.encoders.train.data import load_triples
from alignir.encoders.train.infonce import InfoNCEMethod
from alignir.encoders.train.trainer import train
from alignir.errors import InvalidInputError

from conftest import train_config, train_log

pytestmark = pytest.mark.usefixtures("one_thread")


def _method(tiny_model, hp: dict, dropout: float = 0.0) -> InfoNCEMethod:
    """InfoNCE on a fresh LoRA whose weights are all non-zero (a fresh LoRA's B is zero, which
    would leave every A gradient zero and the comparison half empty)."""
    torch.manual_seed(0)
    peft_model = add_lora(copy.deepcopy(tiny_model.model), r=4, alpha=8, dropout=dropout)
    with torch.no_grad():
        for name, p in peft_model.named_parameters():
            if p.requires_grad:
                p.copy_(0.2 * torch.randn_like(p))
    peft_model.train()
    return InfoNCEMethod(peft_model, tiny_model, "contrastive", hp, {}, max_length=32)


def _grads(method: InfoNCEMethod) -> dict[str, torch.Tensor]:
    out = {n: p.grad.clone() for n, p in method.model.named_parameters() if p.requires_grad}
    method.model.zero_grad(set_to_none=True)
    return out


def _assert_same_grads(got: dict, want: dict) -> None:
    """Equal up to fp32 rounding: the sub-batches pad differently and sum in another order (seen:
    1e-6 of a tensor's largest entry)."""
    assert got.keys() == want.keys() and want
    for name in want:
        scale = float(want[name].abs().max())
        assert scale > 0, name
        torch.testing.assert_close(got[name], want[name], rtol=1e-4, atol=1e-5 * scale)


TERMS = {
    "infonce": {},
    "teacher": "teacher",
    "sparse_distill": {"sparse_distill": 1.0},
    "all": "all",
}


@pytest.mark.parametrize("terms", list(TERMS), ids=list(TERMS))
def test_one_step_gradient_equals_the_full_batch_gradient(terms, tiny_model, tiny_bert, data_files):
    """grad_cache=2 (queries and documents in sub-batches of two texts: 3 + 6 forwards twice)
    gives the LoRA gradients and the logged loss parts of the one full-batch forward."""
    hp = TERMS[terms]
    if hp == "teacher":
        hp = {"teacher": str(tiny_bert), "distill": 0.5}
    elif hp == "all":
        hp = {"teacher": str(tiny_bert), "distill": 0.5, "sparse": 0.3, "sparse_distill": 1.0}
    batch = load_triples(data_files["pairs"])
    plain = _method(tiny_model, hp)
    want_logs = plain.backward(batch, 0.5)
    want = _grads(plain)
    cached = _method(tiny_model, {**hp, "grad_cache": 2})
    got_logs = cached.backward(batch, 0.5)
    _assert_same_grads(_grads(cached), want)
    assert got_logs.keys() == want_logs.keys()
    for k in want_logs:
        assert got_logs[k] == pytest.approx(want_logs[k], rel=1e-5), k
    # the held-out loss (no autograd) embeds in sub-batches too, to the same value
    with torch.no_grad():
        _, eval_logs = cached.loss(batch)
    assert eval_logs["loss"] == pytest.approx(want_logs["loss"], rel=1e-5)


def test_dropout_masks_are_replayed(tiny_model, data_files):
    """With LoRA dropout the second forward of each sub-batch must draw the masks of its first:
    the cached gradient equals autograd through the same sub-batch forwards (same seed, same
    order), and that gradient depends on the masks (another seed gives another one)."""
    batch = load_triples(data_files["pairs"])
    queries, docs, _ = pair_texts(batch)

    def reference(seed: int) -> dict:
        m = _method(tiny_model, {}, dropout=0.3)
        torch.manual_seed(seed)
        q = torch.cat([m.reader.embed_with(m.model, queries[i:i + 4], "query") for i in range(0, len(queries), 4)])
        d = torch.cat([m.reader.embed_with(m.model, docs[i:i + 4], "document") for i in range(0, len(docs), 4)])
        loss, _ = m.objective(batch, q, d)
        loss.backward()
        return _grads(m)

    want = reference(11)
    other = reference(12)
    assert any(not torch.allclose(want[n], other[n], rtol=1e-3, atol=1e-5) for n in want)
    cached = _method(tiny_model, {"grad_cache": 4}, dropout=0.3)
    torch.manual_seed(11)
    cached.backward(batch)
    after = torch.get_rng_state()
    _assert_same_grads(_grads(cached), want)
    # the generator continues from where the first forwards left it, as without the replay
    torch.manual_seed(11)
    with torch.no_grad():
        for i in range(0, len(queries), 4):
            cached.reader.embed_with(cached.model, queries[i:i + 4], "query")
        for i in range(0, len(docs), 4):
            cached.reader.embed_with(cached.model, docs[i:i + 4], "document")
    assert torch.equal(torch.get_rng_state(), after)


def test_a_run_gives_the_same_adapter_and_log(tiny_model, data_files, tmp_path):
    """Three optimizer steps (two micro-batches each, held-out loss logged) with grad_cache=3: the
    losses, held-out losses and final LoRA weights of the plain run; the setting is recorded."""
    from safetensors.torch import load_file

    kw = dict(steps=3, batch_size=2, grad_accum=2, eval_examples=2, hp={"sparse_distill": 0.5})
    plain = train(train_config(tmp_path / "plain", "infonce", "contrastive", data_files["pairs"], **kw),
                  loaded=tiny_model)
    kw["hp"] = {**kw["hp"], "grad_cache": 3}
    cached = train(train_config(tmp_path / "cached", "infonce", "contrastive", data_files["pairs"], **kw),
                   loaded=tiny_model)
    for name in ("loss_log.jsonl", "eval_log.jsonl"):
        a, b = train_log(plain["out"], name), train_log(cached["out"], name)
        assert len(a) == len(b) > 1
        for x, y in zip(a, b):
            for k in ("loss", "infonce", "sparse_distill"):
                assert y[k] == pytest.approx(x[k], rel=1e-4), (name, k)
    wa = load_file(str(Path(plain["out"]) / "adapter_model.safetensors"))
    wb = load_file(str(Path(cached["out"]) / "adapter_model.safetensors"))
    assert wa.keys() == wb.keys()
    for k in wa:
        # a fresh LoRA's B is zero: what it holds now is the three steps' updates (about 6e-3)
        assert "lora_B" not in k or float(wa[k].abs().max()) > 1e-3, k
        torch.testing.assert_close(wb[k], wa[k], rtol=1e-4, atol=1e-5)
    meta = json.loads((Path(cached["out"]) / "alignir_train.json").read_text())
    assert meta["hp"]["grad_cache"] == 3 and meta["config"]["hp"]["grad_cache"] == 3


def test_a_checkpoint_with_another_sub_batch_is_not_resumed(tiny_model, data_files, tmp_path):
    cfg = train_config(tmp_path, "infonce", "contrastive", data_files["pairs"], steps=3, hp={"grad_cache": 2},
                       stop_after=1)
    assert train(cfg, loaded=tiny_model)["interrupted"]
    with pytest.raises(InvalidInputError, match=r"cannot resume .*hp: .*'grad_cache': 2.* -> .*'grad_cache': 4"):
        train(dataclasses.replace(cfg, hp={"grad_cache": 4}), loaded=tiny_model)
    assert train(dataclasses.replace(cfg, stop_after=None), loaded=tiny_model)["steps"] == 3


@pytest.mark.parametrize("grad_cache", [0, 2])
def test_a_non_finite_loss_stops_before_its_backward(grad_cache, tiny_model, data_files, tmp_path):
    """tau = 1e-40 overflows the logits: the step is refused, naming it, before any update."""
    cfg = train_config(tmp_path, "infonce", "contrastive", data_files["pairs"], steps=2,
                       hp={"grad_cache": grad_cache, "tau": 1e-40})
    with pytest.raises(FloatingPointError, match=r"step 0: non-finite loss nan"):
        train(cfg, loaded=tiny_model)


@pytest.mark.parametrize("bad", [-1, 2.5, "four", True, [2]])
def test_a_bad_sub_batch_is_a_clear_error(bad, tiny_model, data_files, tmp_path):
    cfg = train_config(tmp_path, "infonce", "contrastive", data_files["pairs"], steps=1, hp={"grad_cache": bad})
    with pytest.raises(InvalidInputError, match="grad_cache must be a whole number of texts per sub-batch"):
        train(cfg, loaded=tiny_model)
    assert not (tmp_path / "infonce-contrastive" / "checkpoint").exists()


def test_the_cli_takes_the_setting(tiny_folder, data_files, tmp_path):
    """`alignir train infonce --set grad_cache=N` trains; a negative N is a usage error."""
    from typer.testing import CliRunner

    from alignir.retrieval.cli import app

    base = ["train", "infonce", "--data", data_files["pairs"], "--model", str(tiny_folder), "--steps", "1",
            "--batch-size", "3", "--max-length", "32"]
    res = CliRunner().invoke(app, [*base, "--out", str(tmp_path / "a"), "--set", "grad_cache=2"])
    assert res.exit_code == 0, res.output
    assert json.loads((tmp_path / "a" / "alignir_train.json").read_text())["hp"]["grad_cache"] == 2
    res = CliRunner().invoke(app, [*base, "--out", str(tmp_path / "b"), "--set", "grad_cache=-2"])
    assert res.exit_code == 2 and "grad_cache must be a whole number" in res.output
    assert np.isfinite(train_log(tmp_path / "a")[0]["loss"])
