"""int8 encoders: int8 Linear layers in the backbone (per-channel weights,
per-token activations: encoders.int8_linear, checked against a hand computation),
the LM head fp32, the caller's model untouched, adapters merged before quantising, the precision
in the fingerprint (cache and index), and an index refusing a query encoder of another precision.
All on the tiny real (random-init) Llama; one test on the real SmolLM2 (marked ``model``)."""
from __future__ import annotations

import json
import logging

import numpy as np
import pytest
import torch
from conftest import share_model_cache, TINY_CORPUS, write_corpus
from typer.testing import CliRunner

from alignir.encoders.cache import EmbeddingCache
from alignir.encoders.embedders import get_embedder
from alignir.encoders.onnx_runtime import apply_runtime, runtime_of
from alignir.encoders.models import backbone
from alignir.encoders.int8_linear import Int8Linear, quantize_rows
from alignir.encoders.quantize import INT8_SCHEME, check_precision, precision_of
from alignir.errors import InvalidInputError
from alignir.errors import FingerprintMismatch
from alignir.retrieval.indexer import build_index
from alignir.errors import PrecisionMismatch
from alignir.retrieval.searcher import Searcher

pytestmark = pytest.mark.usefixtures("one_thread")

QDyn = Int8Linear


def _cos(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)


def _linear_types(module: torch.nn.Module) -> set[type]:
    return {type(m) for m in module.modules() if isinstance(m, (torch.nn.Linear, QDyn))}


def _assert_int8(module: torch.nn.Module) -> None:
    """int8 everywhere but the MLP down-projections (encoders.quantize.FP32_LINEARS)."""
    kinds = {n: type(m) for n, m in module.named_modules() if isinstance(m, (torch.nn.Linear, QDyn))}
    assert kinds and all((t is torch.nn.Linear) == n.endswith("down_proj") for n, t in kinds.items()), kinds


def test_int8_linear_by_hand():
    """y = (x_q W_q^T) * s_x s_w^T + b with per-row scales max|row|/127, exactly as written."""
    torch.manual_seed(0)
    lin = torch.nn.Linear(8, 5)
    x = torch.randn(2, 3, 8)
    x[0, 1] *= 100  # a large token: per-token scales leave the other tokens alone
    q = Int8Linear(lin)
    xs = x.reshape(-1, 8).abs().amax(1, keepdim=True) / 127
    xq = torch.round(x.reshape(-1, 8) / xs).clamp(-127, 127)
    ws = lin.weight.abs().amax(1, keepdim=True) / 127
    wq = torch.round(lin.weight / ws).clamp(-127, 127)
    want = ((xq @ wq.T) * xs * ws.T + lin.bias).reshape(2, 3, 5)
    torch.testing.assert_close(q(x), want.detach(), rtol=1e-6, atol=1e-5)
    assert q.weight_t.dtype == torch.int8 and q.weight_t.shape == (8, 5)
    # per token: a row's result does not depend on the rest of the batch
    torch.testing.assert_close(q(x[1:, :1]), q(x)[1:, :1], rtol=0, atol=0)
    # close to the fp32 layer
    torch.testing.assert_close(q(x), lin(x).detach(), rtol=0.05, atol=0.05 * float(lin(x).detach().abs().max()))
    r, s = quantize_rows(torch.tensor([[0.0, 0.0], [1.0, -2.0]]))
    assert r.tolist() == [[0, 0], [64, -127]] and s[1, 0] == pytest.approx(2 / 127)


def test_check_precision():
    assert check_precision(None) == "fp32"
    assert check_precision(" INT8 ") == "int8"
    with pytest.raises(InvalidInputError, match="unknown precision 'fp16'.*fp32, int8"):
        check_precision("fp16")
    with pytest.raises(InvalidInputError, match="unknown precision"):
        get_embedder("prompteol", "no-such-model-is-loaded", precision="int4")


def test_int8_prompteol_quantises_a_copy_and_keeps_the_head(tiny_model):
    before = {n: p.detach().clone() for n, p in tiny_model.model.named_parameters()}
    fp = get_embedder("prompteol", tiny_model, progress=False)
    ref = fp.encode_documents(TINY_CORPUS)
    q = get_embedder("prompteol", tiny_model, progress=False, precision="int8")
    # the embedder runs int8 Linear layers; the caller's model keeps its fp32 ones, bit for bit
    _assert_int8(q._backbone)
    assert QDyn not in _linear_types(tiny_model.model)
    # the fixed prompt prefix runs once through the caller's fp32 backbone
    assert q.prefix_cache and q._prefix_backbone is backbone(tiny_model.model)
    for n, p in tiny_model.model.named_parameters():
        assert torch.equal(p, before[n]), n
    assert np.array_equal(fp.encode_documents(TINY_CORPUS), ref)
    # the LM head E_g is the caller's fp32 tensor (aligned tokens read through the exact head)
    assert q.lm_head is tiny_model.lm_head and q.lm_head.dtype == torch.float32
    h = q.encode_documents(TINY_CORPUS)
    assert h.dtype == np.float32 and h.shape == ref.shape
    assert not np.array_equal(h, ref)  # really another computation ...
    assert _cos(h, ref).min() > 0.99  # ... close to fp32
    # the precision is in the identity, hence in the fingerprint, and nowhere else
    assert precision_of(q) == "int8" and precision_of(fp) == "fp32"
    a, b = fp.fingerprint(), q.fingerprint()
    assert "precision" not in a["model"]
    scheme = b["model"]["int8_scheme"]
    assert scheme.startswith(INT8_SCHEME) and "smoothquant" in scheme and "prompt-prefix" in scheme
    assert b["model"] == {**a["model"], "precision": "int8", "int8_scheme": scheme}
    assert {k: v for k, v in b.items() if k != "model"} == {k: v for k, v in a.items() if k != "model"}
    # fp32 asked explicitly is the default embedder, fingerprint unchanged
    assert get_embedder("prompteol", tiny_model, progress=False, precision="fp32").fingerprint() == a


def _random_lora(model, folder):
    """A LoRA adapter with random (non-zero) B matrices, saved as alignir saves adapters."""
    import copy

    from alignir.encoders.train.adapter import add_lora, save_adapter

    torch.manual_seed(1)
    pm = add_lora(copy.deepcopy(model.model), r=4, alpha=8)
    for n, p in pm.named_parameters():
        if "lora_B" in n:
            torch.nn.init.normal_(p, std=0.2)
    return save_adapter(pm, folder, None, {"method": "infonce", "hp": {}})


def test_int8_with_an_adapter_runs_the_merged_adapter(tiny_model, tmp_path):
    adapter = str(_random_lora(tiny_model, tmp_path / "lora"))
    plain = get_embedder("prompteol", tiny_model, progress=False).encode_documents(TINY_CORPUS)
    fp = get_embedder("infonce", tiny_model, progress=False, adapter=adapter)
    q = get_embedder("infonce", tiny_model, progress=False, adapter=adapter, precision="int8")
    ref, h = fp.encode_documents(TINY_CORPUS), q.encode_documents(TINY_CORPUS)
    assert _cos(ref, plain).max() < 0.98  # the adapter matters on these texts
    assert _cos(h, ref).min() > 0.99  # int8 follows the adapter, not the bare model
    _assert_int8(q._backbone)  # merged: no LoRA side path left
    assert not any("lora" in n for n, _ in q._backbone.named_modules())
    assert QDyn not in _linear_types(tiny_model.model)
    assert q.fingerprint()["adapter_sha256"] == fp.fingerprint()["adapter_sha256"]
    assert q.fingerprint()["model"]["precision"] == "int8"


def test_int8_trained_family_without_adapter(tiny_model):
    fp = get_embedder("autoregembed", tiny_model, k=2)
    q = get_embedder("autoregembed", tiny_model, k=2, precision="int8")
    assert q.model is not tiny_model.model and QDyn not in _linear_types(tiny_model.model)
    _assert_int8(backbone(q.model))  # the LM head outside the backbone stays fp32
    ref, h = fp.encode_documents(TINY_CORPUS), q.encode_documents(TINY_CORPUS)
    assert _cos(h, ref).min() > 0.99 and not np.array_equal(h, ref)
    assert q.fingerprint()["model"]["precision"] == "int8"


def test_embedding_cache_keeps_precisions_apart(tiny_model, tmp_path):
    cache = EmbeddingCache(tmp_path / "cache")
    fp = get_embedder("prompteol", tiny_model, progress=False)
    q = get_embedder("prompteol", tiny_model, progress=False, precision="int8")
    a = cache.encode_cached(fp, TINY_CORPUS, "document", progress=False)
    b = cache.encode_cached(q, TINY_CORPUS, "document", progress=False)
    assert cache.folder(fp.fingerprint(), "document") != cache.folder(q.fingerprint(), "document")
    assert np.array_equal(a, fp.encode_documents(TINY_CORPUS))
    assert np.array_equal(b, q.encode_documents(TINY_CORPUS))  # not the fp32 rows of the same texts
    assert np.array_equal(cache.encode_cached(q, TINY_CORPUS, "document", progress=False), b)


@pytest.fixture(scope="module")
def int8_index(tmp_path_factory, tiny_model):
    d = tmp_path_factory.mktemp("int8")
    corpus = write_corpus(d / "corpus.jsonl", TINY_CORPUS)
    build_index(corpus, d / "idx", model="tiny", loaded=tiny_model, cache_dir=d / "cache", progress=False,
                precision="int8")
    return d / "idx"


def test_int8_index_records_precision_and_searches_with_it(int8_index, tiny_model):
    man = json.loads((int8_index / "manifest.json").read_text())
    assert man["embedder"]["options"]["precision"] == "int8"
    assert man["encoder"]["model"]["precision"] == "int8"
    s = Searcher.open(int8_index, loaded=tiny_model)  # default: the index's precision
    assert precision_of(s.embedder) == "int8"
    q = get_embedder("prompteol", tiny_model, progress=False, precision="int8")
    H = s.encode(["plants and light"]).legs["dense"]
    assert np.array_equal(H, q.encode_queries(["plants and light"]))
    # the stored document vectors are the int8 encoder's
    from alignir.index.store import open_index

    stored = open_index(int8_index, parts=("dense",))
    assert np.allclose(stored.dense_vectors, q.encode_documents(TINY_CORPUS), atol=1e-6)
    hits = s.search("plants and light", k=3, mode="hybrid")
    assert len(hits) == 3 and {h.id for h in hits} <= {f"d{i}" for i in range(len(TINY_CORPUS))}


def test_precision_mismatch_is_refused_clearly_or_allowed_with_a_warning(int8_index, tiny_model, caplog):
    with pytest.raises(PrecisionMismatch) as e:
        Searcher.open(int8_index, loaded=tiny_model, precision="fp32")
    msg = str(e.value)
    assert "built by a int8 encoder but the query encoder is fp32" in msg and "--precision int8" in msg
    assert isinstance(e.value, FingerprintMismatch)
    with caplog.at_level(logging.WARNING):
        s = Searcher.open(int8_index, loaded=tiny_model, precision="fp32", allow_precision_mismatch=True)
    assert precision_of(s.embedder) == "fp32"
    assert any("query encoder is fp32, the index's encoder int8" in r.getMessage() for r in caplog.records)
    fp = apply_runtime(get_embedder("prompteol", tiny_model, progress=False), runtime_of(s.embedder))
    assert np.array_equal(s.encode(["plants"]).legs["dense"], fp.encode_queries(["plants"]))


def test_allow_mismatch_does_not_hide_other_differences(int8_index, tiny_model_bos):
    with pytest.raises(FingerprintMismatch) as e:
        Searcher.open(int8_index, loaded=tiny_model_bos, precision="fp32", allow_precision_mismatch=True)
    assert not isinstance(e.value, PrecisionMismatch)
    with pytest.raises(FingerprintMismatch) as e:  # another model *and* another precision: the model is named
        Searcher.open(int8_index, loaded=tiny_model_bos, precision="fp32")
    assert not isinstance(e.value, PrecisionMismatch) and "model.name" in str(e.value)


def test_fp32_build_is_unchanged(tmp_path, tiny_model):
    corpus = write_corpus(tmp_path / "corpus.jsonl", TINY_CORPUS)
    build_index(corpus, tmp_path / "idx", model="tiny", loaded=tiny_model, cache_dir=tmp_path / "c", progress=False,
                precision="fp32")
    man = json.loads((tmp_path / "idx" / "manifest.json").read_text())
    assert "precision" not in man["embedder"]["options"] and "precision" not in man["encoder"]["model"]
    with pytest.raises(PrecisionMismatch, match="built by a fp32 encoder but the query encoder is int8"):
        Searcher.open(tmp_path / "idx", loaded=tiny_model, precision="int8")


def test_cli_precision(tmp_path, tiny_folder, monkeypatch):
    from alignir.retrieval.cli import app

    monkeypatch.setenv("ALIGNIR_CACHE", str(tmp_path / "cache"))
    share_model_cache(tmp_path / "cache")  # the run's converted models and ONNX exports
    folder = tiny_folder  # the run's one copy of tiny_model, so its ONNX export is made once
    corpus = write_corpus(tmp_path / "corpus.jsonl", TINY_CORPUS)
    run = CliRunner().invoke
    r = run(app, ["build-index", str(corpus), "--index", str(tmp_path / "idx"), "--model", str(folder),
                  "--precision", "int8"])
    assert r.exit_code == 0, r.output
    r = run(app, ["search", "--index", str(tmp_path / "idx"), "plants", "--json", "--mode", "dense"])
    assert r.exit_code == 0, r.output
    r = run(app, ["search", "--index", str(tmp_path / "idx"), "plants", "--precision", "fp32"])
    assert r.exit_code == 1 and "--allow-precision-mismatch" in r.output
    r = run(app, ["search", "--index", str(tmp_path / "idx"), "plants", "--precision", "fp32",
                  "--allow-precision-mismatch"])
    assert r.exit_code == 0, r.output
    r = run(app, ["build-index", str(corpus), "--index", str(tmp_path / "i2"), "--model", str(folder),
                  "--precision", "int4"])
    assert r.exit_code == 1 and "unknown precision 'int4'" in r.output
    # beir: build + eval in one go at int8 (the eval's searcher takes the index's precision)
    beir = tmp_path / "beir"
    (beir / "qrels").mkdir(parents=True)
    (beir / "corpus.jsonl").write_text(corpus.read_text())
    (beir / "queries.jsonl").write_text(json.dumps({"_id": "q1", "text": "plants"}) + "\n")
    (beir / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td0\t1\n")
    r = run(app, ["beir", str(beir), "--index", str(tmp_path / "i3"), "--model", str(folder), "--precision", "int8",
                  "--json", "--mode", "dense"])
    assert r.exit_code == 0, r.output
    man = json.loads((tmp_path / "i3" / "manifest.json").read_text())
    assert man["encoder"]["model"]["precision"] == "int8"


@pytest.mark.model
def test_int8_smollm2_agrees_with_fp32(smollm2):
    """On the real model: the int8 vectors keep cosine > 0.95 with fp32 on real texts (the
    benchmark measures the retrieval quality)."""
    texts = TINY_CORPUS[:4]
    ref = get_embedder("prompteol", smollm2, progress=False).encode_documents(texts)
    h = get_embedder("prompteol", smollm2, progress=False, precision="int8").encode_documents(texts)
    assert _cos(h, ref).min() > 0.95


def _tiny_gemma(tok):
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    from alignir.encoders.models import wrap_model

    torch.manual_seed(0)
    cfg = Gemma3TextConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                           num_attention_heads=4, num_key_value_heads=2, head_dim=8, max_position_embeddings=512,
                           pad_token_id=tok.pad_token_id, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id)
    model = Gemma3ForCausalLM(cfg)
    with torch.no_grad():  # random norm weights, so that folding 1+w is really exercised
        for n, p in model.named_parameters():
            if "norm" in n:
                p.uniform_(-0.5, 0.5)
    return wrap_model("tiny-gemma", tok, model, {"name": "tiny-gemma", "source": "random-init", "seed": 0}, "cpu")


@pytest.mark.parametrize("which", ["llama", "gemma"])
def test_smoothing_keeps_the_fp32_function(which, tiny_model, tiny_tokenizer_bos):
    """SmoothQuant's scales folded into the norms and projections change nothing in fp32
    (Llama norm x·w, Gemma norm x·(1+w)), and the caller's model is untouched."""
    from alignir.encoders.quantize import _structure_copy
    from alignir.encoders.smoothing import CALIBRATION_TEXTS, input_maxima, smooth, smoothing_groups

    loaded = tiny_model if which == "llama" else _tiny_gemma(tiny_tokenizer_bos)
    e = get_embedder("prompteol", loaded, progress=False)
    fp32 = e._backbone
    before = {n: p.detach().clone() for n, p in fp32.named_parameters()}
    ref = e.encode_documents(TINY_CORPUS)
    layers = list(fp32.layers)
    assert [len(smoothing_groups(x)) for x in layers] == [2, 2]
    maxima = input_maxima(layers, lambda: e.encode_documents(list(CALIBRATION_TEXTS)))
    assert len(maxima) == 4
    copy = _structure_copy(fp32)
    assert smooth(list(copy.layers), maxima) == 4
    norm = copy.layers[0].input_layernorm.weight
    assert not torch.allclose(norm, fp32.layers[0].input_layernorm.weight)  # really rescaled
    e._backbone = copy
    np.testing.assert_allclose(e.encode_documents(TINY_CORPUS), ref, rtol=1e-4, atol=1e-4)
    for n, p in fp32.named_parameters():
        assert torch.equal(p, before[n]), n
    # and int8 on top of it stays close to fp32
    q = get_embedder("prompteol", loaded, progress=False, precision="int8")
    assert _cos(q.encode_documents(TINY_CORPUS), ref).min() > 0.99


def test_resparsify_an_int8_index(int8_index, tiny_model, tmp_path):
    """The writer rebuilds the index's int8 encoder from the manifest (the fingerprint matches)."""
    import shutil

    from alignir.retrieval.indexer import resparsify

    idx = tmp_path / "copy"
    shutil.copytree(int8_index, idx)
    man = resparsify(idx, loaded=tiny_model, doc_k=8)
    assert man["params"]["sparse"]["doc_k"] == 8 and man["encoder"]["model"]["precision"] == "int8"
    assert len(Searcher.open(idx, loaded=tiny_model).search("plants", k=2, mode="sparse")) <= 2


def test_shared_input_groups_equal_separate_int8_layers(tiny_model):
    """q/k/v and gate/up stacked into one int8 GEMM (int8_linear.SharedInputInt8) give the
    separate int8 layers' outputs bit for bit, in any calling order, and recompute for a new input."""
    from alignir.encoders.int8_linear import Int8Slice, SharedInputInt8
    from alignir.encoders.quantize import _structure_copy, quantize_module

    bb = backbone(tiny_model.model)
    fused, separate = quantize_module(_structure_copy(bb)), quantize_module(_structure_copy(bb), shared_inputs=False)
    attn, mlp = fused.layers[0].self_attn, fused.layers[0].mlp
    assert all(isinstance(getattr(attn, n), Int8Slice) for n in ("q_proj", "k_proj", "v_proj"))
    assert all(isinstance(getattr(mlp, n), Int8Slice) for n in ("gate_proj", "up_proj"))
    assert attn.q_proj.group is attn.v_proj.group and isinstance(attn.q_proj.group, SharedInputInt8)
    assert type(attn.o_proj) is Int8Linear and type(mlp.down_proj) is torch.nn.Linear
    assert QDyn not in _linear_types(bb)
    ids = torch.randint(5, 100, (2, 7))
    groups = {id(m): m for m in fused.modules() if isinstance(m, SharedInputInt8)}.values()
    with torch.inference_mode():
        b = separate(input_ids=ids).last_hidden_state
        assert torch.equal(fused(input_ids=ids).last_hidden_state, b)  # 14 rows: one stacked GEMM
        for g in groups:
            g.STACKED_MAX_ROWS = 0  # one GEMM per member over its rows of the stacked weights
        assert torch.equal(fused(input_ids=ids).last_hidden_state, b)
    sep = separate.layers[0].self_attn
    x, x2 = torch.randn(3, attn.q_proj.in_features), torch.randn(3, attn.q_proj.in_features)
    for order in (("v_proj", "q_proj", "k_proj"), ("k_proj", "k_proj", "q_proj", "v_proj")):
        for n in order:
            assert torch.equal(getattr(attn, n)(x), getattr(sep, n)(x)), n
    assert torch.equal(attn.q_proj(x), sep.q_proj(x)) and torch.equal(attn.k_proj(x2), sep.k_proj(x2))
    assert torch.equal(attn.q_proj(x), sep.q_proj(x))
    x.mul_(2)  # the same tensor, modified in place since q_proj read it: recomputed
    assert torch.equal(attn.k_proj(x), sep.k_proj(x)) and torch.equal(attn.v_proj(x), sep.v_proj(x))
