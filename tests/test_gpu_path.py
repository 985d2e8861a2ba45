"""The parts of the GPU encode path that run the same on a CPU: the batch budget per device,
the numpy collate, the tokenizer steps run ahead on a thread, the tokenizer-threads switch.
(benchmarks/gpu/gpu_check.py runs the rest on a real GPU: vectors against the CPU's, speed.)"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from alignir.encoders import batching, models
from alignir.encoders.embedders.prompteol import PromptEOLEmbedder


def test_cpu_budget_is_fixed(tiny_model):
    assert batching.batch_budget(tiny_model.model, torch.device("cpu")) == (batching.CPU_BATCH_TOKENS,
                                                                           batching.CPU_MAX_ROWS)


def test_gpu_budget_follows_free_memory_and_the_model_size():
    from transformers import LlamaConfig

    class Big(torch.nn.Module):  # a 7B-sized config without its weights: only config and dtype are read
        def __init__(self):
            super().__init__()
            self.config = LlamaConfig(hidden_size=4096, intermediate_size=14336)
            self.w = torch.nn.Parameter(torch.zeros(1, dtype=torch.bfloat16))

    per_token = 2 * (4 * 4096 + 3 * 14336) * 2  # bytes: (4d + 3I) values of 2 bytes, doubled
    assert batching.activation_bytes_per_token(Big().config, torch.bfloat16) == per_token
    free = 8 * 2 ** 30
    tokens, rows = batching.batch_budget(Big(), torch.device("cuda"), free_bytes=free)
    assert tokens == int(0.25 * free) // per_token == 9039 and rows == batching.GPU_MAX_ROWS
    # a small model on a large card hits the cap; a full card never goes below the CPU budget
    tiny_tokens, _ = batching.batch_budget(Big(), torch.device("cuda"), free_bytes=2 ** 50)
    assert tiny_tokens == batching.GPU_MAX_TOKENS
    assert batching.batch_budget(Big(), torch.device("cuda"), free_bytes=0)[0] == batching.CPU_BATCH_TOKENS


def _collate_by_rows(ids, pos, pad_id, side):
    """The padded batch built row by row (the reference for the vectorised collate)."""
    L, B = max(len(x) for x in ids), len(ids)
    input_ids = torch.full((B, L), pad_id, dtype=torch.long)
    attn = torch.zeros((B, L), dtype=torch.long)
    pmask = torch.zeros((B, L), dtype=torch.bool)
    for r, (x, p) in enumerate(zip(ids, pos)):
        off = L - len(x) if side == "left" else 0
        input_ids[r, off:off + len(x)] = torch.tensor(x)
        attn[r, off:off + len(x)] = 1
        if p:
            pmask[r, torch.tensor(p) + off] = True
        else:
            pmask[r, off:off + len(x)] = True
    return input_ids, attn, (attn.cumsum(1) - 1).clamp(min=0), pmask


@pytest.mark.parametrize("side", ["right", "left"])
def test_collate_equals_the_row_by_row_batch(tiny_model, side):
    emb = PromptEOLEmbedder(tiny_model, padding_side=side, progress=False)
    rng = np.random.default_rng(0)
    ids = [rng.integers(5, 300, size=n).tolist() for n in (7, 1, 12, 3)]
    pos = [[2, 3, 4], [], list(range(12)), [0]]
    got = emb.collate(ids, pos)
    want = _collate_by_rows(ids, pos, emb._pad_id, side)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype
        assert torch.equal(g, w)


def test_stepped_encode_equals_one_step(tiny_model):
    texts = ["plants make glucose from light", "", "interest rates rose", "a fox", "supersonic flow over a plate",
             "proteins fold", "   ", "ranking by relevance", "the dog", "carbon dioxide and water"] * 2
    one = PromptEOLEmbedder(tiny_model, progress=False, max_batch_size=4)
    want = one.encode_documents(texts)
    stepped = PromptEOLEmbedder(tiny_model, progress=False, max_batch_size=4)
    stepped._step_texts = lambda n: 3  # tokenizer steps of 3 texts, each step's successor on the thread
    got = stepped.encode_documents(texts)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert not got[1].any() and not got[6].any()  # empty texts keep their zero rows
    for key in ("n_texts", "n_empty", "n_truncated", "n_tokens"):
        assert stepped.last_stats[key] == one.last_stats[key]


def test_tokenizer_threads_follow_the_device_unless_the_user_chose(monkeypatch):
    monkeypatch.setattr(models, "_parallelism_set_here", False)
    monkeypatch.delenv("TOKENIZERS_PARALLELISM", raising=False)
    models._tokenizer_threads(torch.device("cuda"))
    assert models.os.environ["TOKENIZERS_PARALLELISM"] == "true"
    models._tokenizer_threads(torch.device("cpu"))  # set here: follows the model loaded last
    assert models.os.environ["TOKENIZERS_PARALLELISM"] == "false"
    monkeypatch.setattr(models, "_parallelism_set_here", False)
    monkeypatch.setenv("TOKENIZERS_PARALLELISM", "false")  # the user's own setting wins
    models._tokenizer_threads(torch.device("cuda"))
    assert models.os.environ["TOKENIZERS_PARALLELISM"] == "false"


def test_gpu_check_tiny_step_runs_on_the_cpu():
    from benchmarks.gpu.gpu_check import check_tiny

    out = check_tiny("cpu", None)
    assert out["float32"]["min_cosine"] > 0.9999
    assert out["float32"]["same_dense_top10"] and out["float32"]["same_sparse_top10"]


@pytest.mark.e2e  # a child Python process
@pytest.mark.parametrize("preset", [None, "false"])
def test_gpu_check_does_not_take_the_test_suites_tokenizer_setting_for_a_users(preset):
    """tests/conftest.py turns the tokenizer's threads off for the suite; gpu_check imports it for
    the tiny model, and must still see the product's default beside a GPU (threads on), unless
    whoever runs the check set the variable."""
    import os
    import subprocess
    import sys

    code = ("import torch; import benchmarks.gpu.gpu_check as g; g._tiny_loaded('cpu', torch.float32); from alignir.encoders import models; "
            "models._tokenizer_threads(torch.device('cuda')); import os; print(os.environ.get('TOKENIZERS_PARALLELISM'))")
    env = {k: v for k, v in os.environ.items() if k != "TOKENIZERS_PARALLELISM"}
    if preset is not None:
        env["TOKENIZERS_PARALLELISM"] = preset
    root = Path(__file__).resolve().parents[1]
    out = subprocess.run([sys.executable, "-c", code], cwd=root, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == ("true" if preset is None else preset)
