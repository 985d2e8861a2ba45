"""A training batch's forward in groups of similar length (encoders.batching.length_groups):
the split is the cheapest one (against brute force over every split of the sorted order), and the
embeddings and their gradients are those of the batch as one padded block."""
from __future__ import annotations

import copy
import itertools

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from alignir.encoders.batching import length_groups
from alignir.encoders.embedders.prompteol import PromptEOLEmbedder
from alignir.encoders.train.adapter import add_lora

from conftest import TINY_CORPUS


def _cost(groups: list[list[int]], lengths: list[int], overhead: int) -> int:
    return sum(max(lengths[i] for i in g) * len(g) + overhead for g in groups)


def _brute_force(lengths: list[int], overhead: int) -> int:
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    best = None
    for mask in itertools.product((0, 1), repeat=len(order) - 1):  # a cut after position k where mask[k]
        groups, cur = [], [order[0]]
        for k, i in enumerate(order[1:]):
            if mask[k]:
                groups.append(cur)
                cur = []
            cur.append(i)
        groups.append(cur)
        c = _cost(groups, lengths, overhead)
        best = c if best is None else min(best, c)
    return best


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(1, 128), min_size=1, max_size=9), st.integers(0, 200))
def test_the_split_is_the_cheapest_and_covers_every_text_once(lengths, overhead):
    groups = length_groups(lengths, overhead)
    assert sorted(i for g in groups for i in g) == list(range(len(lengths)))
    assert _cost(groups, lengths, overhead) == _brute_force(lengths, overhead)


def test_no_overhead_given_keeps_the_batch_whole_and_in_order():
    from alignir.encoders.batching import forward_overhead_tokens

    assert forward_overhead_tokens("cpu") == 32 and forward_overhead_tokens("cuda:0") is None  # a GPU: one block
    assert length_groups([5, 90, 7], None) == [[0, 1, 2]]
    assert length_groups([], 32) == []
    assert length_groups([9, 100, 10, 101], 0) == [[0], [2], [1], [3]]  # free forwards: no padding at all
    assert length_groups([9, 100, 10, 101], 10_000) == [[0, 2, 1, 3]]  # dear forwards: one, sorted


@pytest.mark.parametrize("overhead", [None, 0, 32])
def test_rows_come_back_in_the_texts_order_tensors_and_tuples(overhead, monkeypatch):
    """in_length_groups puts each group's rows back where their texts were, for one tensor or a tuple."""
    from alignir.encoders import batching

    monkeypatch.setitem(batching.FORWARD_OVERHEAD_TOKENS, "cpu", overhead)
    lengths = [40, 3, 41, 2, 90, 5]
    calls = []

    def forward(group):
        calls.append(list(group))
        ids = torch.tensor(group, dtype=torch.float32)
        return ids[:, None].repeat(1, 3), (ids * 10)[:, None, None]

    a, b = batching.in_length_groups(lengths, "cpu", forward)
    assert sorted(i for c in calls for i in c) == list(range(len(lengths)))
    assert len(calls) == (1 if overhead is None else len(batching.length_groups(lengths, overhead)))
    torch.testing.assert_close(a, torch.arange(6.0)[:, None].repeat(1, 3))
    torch.testing.assert_close(b, torch.arange(6.0)[:, None, None] * 10)
    one = batching.in_length_groups(lengths, "cpu", lambda g: forward(g)[0])
    torch.testing.assert_close(one, a)


@pytest.mark.parametrize("padding_side", ["right", "left"])
def test_grouped_forward_gives_the_one_block_vectors_and_gradients(tiny_model, padding_side, monkeypatch):
    """The same embeddings and LoRA gradients as one padded forward, whatever the split."""
    from alignir.encoders import batching

    texts = [TINY_CORPUS[0][:12], TINY_CORPUS[1], TINY_CORPUS[2][:30], TINY_CORPUS[3], "gene", TINY_CORPUS[4][:50]]
    peft = add_lora(copy.deepcopy(tiny_model.model), 4, 8, 0.0)
    for n, p in peft.named_parameters():
        if "lora_B" in n:  # non-zero B, so the LoRA path carries gradient into A
            torch.nn.init.normal_(p, std=0.02)
    reader = PromptEOLEmbedder(tiny_model, max_length=48, progress=False, padding_side=padding_side)
    ids, _, _, _ = reader.prepare(texts, "document")
    assert len({len(x) for x in ids}) > 3  # lengths that do split

    def run(overhead: int | None):
        monkeypatch.setitem(batching.FORWARD_OVERHEAD_TOKENS, "cpu", overhead)
        peft.zero_grad(set_to_none=True)
        v = reader.embed_with(peft, texts, "document")
        (v * torch.linspace(-1, 1, v.shape[1])).sum().backward()
        grads = {n: p.grad.clone() for n, p in peft.named_parameters() if p.grad is not None}
        return v.detach(), grads, len(length_groups([len(x) for x in ids], overhead))

    whole, g_whole, n_whole = run(None)
    split, g_split, n_split = run(0)
    assert n_whole == 1 and n_split == len({len(x) for x in ids})
    torch.testing.assert_close(split, whole, rtol=1e-5, atol=1e-6)
    assert g_whole and set(g_split) == set(g_whole)
    for n in g_whole:
        torch.testing.assert_close(g_split[n], g_whole[n], rtol=1e-4, atol=1e-7)


@pytest.mark.parametrize("method,stage,kind,hp", [
    ("autoregembed", "contrastive", "pairs", {"k": 3}),
    ("llm2comp", "scl", "pairs", {"k": 2}),
    ("gircse", "icr", "pairs", {"K": 2}),
])
def test_generative_trainers_forward_in_groups_with_the_one_block_vectors_and_gradients(
        method, stage, kind, hp, tiny_model, data_files, tmp_path, monkeypatch):
    """Each generative family's training forward (compress tokens, memory tokens, generated soft
    tokens) gives the states and gradients of one padded block when split by length."""
    from alignir.encoders import batching
    from alignir.encoders.train.trainer import train

    from conftest import train_config

    cfg = train_config(tmp_path, method, stage, data_files[kind], steps=1, hp=hp)
    live = train(cfg, loaded=tiny_model, return_method=True)["method_obj"]
    live.model.eval()  # no dropout: both ways see the same network
    texts = [TINY_CORPUS[0][:12], TINY_CORPUS[1], "gene", TINY_CORPUS[3][:40], TINY_CORPUS[4]]
    forward = {"autoregembed": lambda: live._enc(texts, live.i_self), "llm2comp": lambda: live._embed(texts),
               "gircse": lambda: live._G(texts, None)}[method]
    params = [p for p in live.model.parameters() if p.requires_grad] + ([live.soft] if getattr(live, "soft", None) is not None else [])

    def run(overhead: int | None):
        monkeypatch.setitem(batching.FORWARD_OVERHEAD_TOKENS, "cpu", overhead)
        for p in params:
            p.grad = None
        groups = []
        real = batching.length_groups
        monkeypatch.setattr(batching, "length_groups", lambda lengths, o: groups.append(real(lengths, o)) or groups[-1])
        v = forward()
        monkeypatch.setattr(batching, "length_groups", real)
        (v.float() * torch.linspace(-1, 1, v.shape[-1])).sum().backward()
        return v.detach(), [None if p.grad is None else p.grad.clone() for p in params], len(groups[0])

    whole, g_whole, n_whole = run(None)
    split, g_split, n_split = run(0)
    assert n_whole == 1 and n_split > 2
    torch.testing.assert_close(split, whole, rtol=1e-5, atol=1e-6)
    assert any(g is not None for g in g_whole)
    for a, b in zip(g_split, g_whole):
        assert (a is None) == (b is None)
        if a is not None:  # summed in another order: equal up to rounding at the gradient's own scale
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4 * float(b.abs().max()))
