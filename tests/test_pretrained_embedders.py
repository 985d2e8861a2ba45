"""Public LLM embedders (encoders.pretrained + the ``pretrained`` family) on tiny random-weight
models of each architecture built here: Llama, Mistral, Qwen2, Qwen3 and Gemma 3, saved with and
without ``lm_head``, tied and untied, with the head read from a separate base folder."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from conftest import TINY_CORPUS, write_corpus

from alignir.encoders.aligned import project_topk
from alignir.encoders.embedders import get_embedder
from alignir.encoders.models import load_model
from alignir.encoders.pretrained import PRETRAINED, bidirectional_attention, parse_spec, with_lm_head
from alignir.encoders.shipped import resolve_shipped
from alignir.errors import InvalidInputError

pytestmark = pytest.mark.usefixtures("one_thread")

ARCHS = ("llama", "mistral", "qwen2", "qwen3", "gemma3")
TEXTS = ["light water glucose", "The stock market fell sharply after the central bank raised interest rates.",
         "Proteins fold"]


def _config(arch: str, tok, tie: bool):
    from transformers import Gemma3TextConfig, LlamaConfig, MistralConfig, Qwen2Config, Qwen3Config

    cls = {"llama": LlamaConfig, "mistral": MistralConfig, "qwen2": Qwen2Config, "qwen3": Qwen3Config,
           "gemma3": Gemma3TextConfig}[arch]
    extra = {"sliding_window": None} if arch == "mistral" else {}
    return cls(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
               num_key_value_heads=2, head_dim=8, max_position_embeddings=512, tie_word_embeddings=tie,
               pad_token_id=tok.pad_token_id, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, **extra)


def _save(tmp_path, name: str, arch: str, tok, *, tie: bool, with_head: bool, seed: int = 0):
    """A tiny random model saved as a folder: the causal LM (with_head) or only its backbone
    (what an ``AutoModel`` checkpoint holds). Returns (folder, the causal LM)."""
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(_config(arch, tok, tie)).eval()
    folder = tmp_path / name
    (model if with_head else model.model).save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder, model


def _tensor(folder, suffix: str) -> torch.Tensor:
    """A tensor read straight from a saved folder's safetensors file (no transformers involved)."""
    weights = load_file(str(folder / "model.safetensors"))
    [key] = [k for k in weights if k.endswith(suffix)]
    return weights[key]


def _hidden(loaded, ids: list[int], full_attention: bool = False) -> torch.Tensor:
    """Last hidden states [L, d] of one unpadded prompt, by the model's plain forward (a 4D
    all-True mask for full attention: transformers uses a 4D mask as given)."""
    x = torch.tensor([ids])
    kw = {"attention_mask": torch.ones(1, 1, len(ids), len(ids), dtype=torch.bool)} if full_attention else {}
    with torch.no_grad():
        return loaded.model.get_decoder()(input_ids=x, **kw).last_hidden_state[0].float()


def _check_head(loaded, W: torch.Tensor, texts=TEXTS) -> None:
    """The loaded head is W, and the aligned tokens of real vectors are their logits against W."""
    assert torch.equal(loaded.lm_head.float(), W.float())
    emb = get_embedder("pretrained", loaded, pooling="last", progress=False)
    H = emb.encode_documents(texts)
    ids, logits = project_topk(H, loaded.lm_head, 5)
    full = torch.from_numpy(H) @ W.float().T
    want_vals, want_ids = full.topk(5, dim=1)
    np.testing.assert_allclose(logits, want_vals.numpy(), rtol=1e-5, atol=1e-5)
    assert (np.sort(ids, 1) == np.sort(want_ids.numpy(), 1)).all()


# ------------------------------------------------------------------ the LM head

@pytest.mark.parametrize("arch", ARCHS)
def test_tied_checkpoint_without_lm_head_reads_the_input_embeddings(tmp_path, tiny_tokenizer, arch):
    folder, _ = _save(tmp_path, arch, arch, tiny_tokenizer, tie=True, with_head=False)
    assert not any(k.endswith("lm_head.weight") for k in load_file(str(folder / "model.safetensors")))
    loaded = load_model(str(folder), device="cpu")
    _check_head(loaded, _tensor(folder, "embed_tokens.weight"))
    assert loaded.identity["dim"] == 32


@pytest.mark.parametrize("arch", ARCHS)
def test_untied_causal_checkpoint_reads_its_own_head(tmp_path, tiny_tokenizer, arch):
    folder, _ = _save(tmp_path, arch, arch, tiny_tokenizer, tie=False, with_head=True)
    loaded = load_model(str(folder), device="cpu")
    W = _tensor(folder, "lm_head.weight")
    assert not torch.equal(W, _tensor(folder, "embed_tokens.weight"))
    _check_head(loaded, W)


@pytest.mark.parametrize("arch", ARCHS)
def test_untied_checkpoint_without_lm_head_needs_the_base_head(tmp_path, tiny_tokenizer, arch):
    emb_folder, _ = _save(tmp_path, "embedder", arch, tiny_tokenizer, tie=False, with_head=False, seed=1)
    base, _ = _save(tmp_path, "base", arch, tiny_tokenizer, tie=False, with_head=True, seed=2)
    with pytest.raises(InvalidInputError, match="lm-head-from"):  # its head would be random
        load_model(str(emb_folder), device="cpu")
    loaded = load_model(str(emb_folder), device="cpu", lm_head_from=str(base))
    _check_head(loaded, _tensor(base, "lm_head.weight"))
    assert loaded.identity["lm_head"]["from"] == str(base.resolve())
    # the same through the spec string an index records
    again = load_model(with_lm_head(str(emb_folder), base), device="cpu")
    assert torch.equal(again.lm_head, loaded.lm_head) and again.identity == loaded.identity
    # the input embeddings, chosen explicitly
    own = load_model(str(emb_folder), device="cpu", lm_head_from="input")
    _check_head(own, _tensor(emb_folder, "embed_tokens.weight"))


def test_a_head_of_the_wrong_shape_is_refused(tmp_path, tiny_tokenizer):
    emb_folder, _ = _save(tmp_path, "embedder", "llama", tiny_tokenizer, tie=False, with_head=False)
    from transformers import LlamaForCausalLM

    cfg = _config("llama", tiny_tokenizer, False)
    cfg.hidden_size, cfg.intermediate_size = 48, 96
    LlamaForCausalLM(cfg).save_pretrained(tmp_path / "other")
    with pytest.raises(InvalidInputError, match="shape"):
        load_model(str(emb_folder), device="cpu", lm_head_from=str(tmp_path / "other"))


def test_spec_parameters_round_trip_and_unknown_ones_are_refused(tmp_path):
    spec = with_lm_head("org/embedder", "org/base")
    assert parse_spec(spec) == ("org/embedder", {"lm_head_from": "org/base"})
    assert parse_spec("org/base?adapters=a/x,b/y") == ("org/base", {"adapters": ("a/x", "b/y")})
    with pytest.raises(InvalidInputError, match="unknown parameter"):
        parse_spec("org/embedder?head=org/base")
    assert with_lm_head("org/embedder", None) == "org/embedder"


# ------------------------------------------------------------------ pooling, prompts, padding, attention

@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("side", ["left", "right"])
def test_last_token_pooling_with_instruction_and_appended_eos(tmp_path, tiny_tokenizer, arch, side):
    folder, _ = _save(tmp_path, arch, arch, tiny_tokenizer, tie=True, with_head=False)
    loaded = load_model(str(folder), device="cpu")
    emb = get_embedder("pretrained", loaded, pooling="last", query_template="Instruct: {instruction}\nQuery: {text}",
                       instruction="find plants", append_token="<eos>", padding_side=side, progress=False)
    assert emb.templates["query"].render("q")[0] == "Instruct: find plants\nQuery: q<eos>"
    Q = emb.encode_queries(TEXTS)
    D = emb.encode_documents(TEXTS)
    eos = tiny_tokenizer.eos_token_id
    for i, t in enumerate(TEXTS):
        q_ids = tiny_tokenizer(f"Instruct: find plants\nQuery: {t}<eos>")["input_ids"]
        d_ids = tiny_tokenizer(f"{t}<eos>")["input_ids"]
        assert q_ids[-1] == eos and d_ids[-1] == eos
        np.testing.assert_allclose(Q[i], _hidden(loaded, q_ids)[-1].numpy(), rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(D[i], _hidden(loaded, d_ids)[-1].numpy(), rtol=1e-4, atol=1e-5)
    ids, pos, _, _ = emb.prepare(TEXTS, "query")
    input_ids, attn, _, _ = emb.collate(ids, pos)
    short = int(np.argmin([len(x) for x in ids]))
    assert attn[short, 0 if side == "left" else -1] == 0  # the pads are on the chosen side
    assert input_ids[short, -1 if side == "left" else len(ids[short]) - 1] == eos
    assert emb.fingerprint()["padding_side"] == side


def test_the_appended_token_is_not_doubled_when_the_tokenizer_adds_it(tmp_path, tiny_tokenizer):
    from tokenizers import processors
    from transformers import PreTrainedTokenizerFast

    inner = tiny_tokenizer.backend_tokenizer
    inner = type(inner).from_str(inner.to_str())
    inner.post_processor = processors.TemplateProcessing(single="$A <eos>", special_tokens=[("<eos>", tiny_tokenizer.eos_token_id)])
    tok = PreTrainedTokenizerFast(tokenizer_object=inner, pad_token="<pad>", bos_token="<bos>", eos_token="<eos>")
    folder, _ = _save(tmp_path, "qwen3", "qwen3", tok, tie=True, with_head=False)
    loaded = load_model(str(folder), device="cpu")
    emb = get_embedder("pretrained", loaded, append_token="<eos>", progress=False)
    ids, _, _, _ = emb.prepare(["light water"], "document")
    assert ids[0] == tok("light water")["input_ids"] and ids[0][-1] == tok.eos_token_id
    assert ids[0][-2] != tok.eos_token_id


@pytest.mark.parametrize("arch", ARCHS)
def test_bidirectional_mean_pooling_over_the_text_only(tmp_path, tiny_tokenizer, arch):
    folder, _ = _save(tmp_path, arch, arch, tiny_tokenizer, tie=False, with_head=True)
    loaded = load_model(str(folder), device="cpu")
    kw = dict(pooling="mean", query_template="<unused0>\n{instruction}\n<unused1>\n{text}",
              document_template="<unused1>\n{text}", instruction="find plants", progress=False)
    bi = get_embedder("pretrained", loaded, bidirectional=True, padding_side="left", **kw)
    causal = get_embedder("pretrained", loaded, bidirectional=False, **kw)
    Qb, Qc = bi.encode_queries(TEXTS), causal.encode_queries(TEXTS)
    tok = tiny_tokenizer
    for i, t in enumerate(TEXTS):
        prefix = tok("<unused0>\nfind plants\n<unused1>\n")["input_ids"]
        ids = tok(f"<unused0>\nfind plants\n<unused1>\n{t}")["input_ids"]
        assert ids[: len(prefix)] == prefix
        n = len(prefix)  # the mean reads the text's tokens only
        np.testing.assert_allclose(Qb[i], _hidden(loaded, ids, full_attention=True)[n:].mean(0).numpy(),
                                   rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(Qc[i], _hidden(loaded, ids)[n:].mean(0).numpy(), rtol=1e-4, atol=1e-5)
    assert np.abs(Qb - Qc).max() > 1e-3  # the attention really changed
    ids = tok("light water glucose")["input_ids"]
    assert torch.equal(_hidden(loaded, ids), _hidden(loaded, ids))  # and was restored: causal again
    assert (_hidden(loaded, ids) - _hidden(loaded, ids, full_attention=True)).abs().max() > 1e-3
    assert bi.fingerprint()["attention"] == "bidirectional" and causal.fingerprint()["attention"] == "causal"


def test_bidirectional_attention_restores_the_model(tiny_model):
    model = tiny_model.model.get_decoder()
    flags = [m.is_causal for m in model.modules() if isinstance(getattr(m, "is_causal", None), bool)]
    with bidirectional_attention(model):
        assert not any(m.is_causal for m in model.modules() if isinstance(getattr(m, "is_causal", None), bool))
        assert model.config.is_causal is False
    assert [m.is_causal for m in model.modules() if isinstance(getattr(m, "is_causal", None), bool)] == flags
    assert getattr(model.config, "is_causal", True) is not False


@pytest.mark.parametrize("name", sorted(PRETRAINED))
def test_each_profile_renders_its_published_format(tmp_path_factory, tiny_model, name):
    prof = PRETRAINED[name]
    emb = get_embedder("pretrained", tiny_model, profile=name, append_token="", progress=False)
    want = {"qwen3-embedding-0.6b": "Instruct: {i}\nQuery:q", "qwen3-embedding-4b": "Instruct: {i}\nQuery:q",
            "qwen3-embedding-8b": "Instruct: {i}\nQuery:q", "gte-qwen2-1.5b-instruct": "Instruct: {i}\nQuery: q",
            "gte-qwen2-7b-instruct": "Instruct: {i}\nQuery: q", "e5-mistral-7b-instruct": "Instruct: {i}\nQuery: q",
            "gritlm-7b": "<|user|>\n{i}\n<|embed|>\nq", "llm2vec-mistral-7b-supervised": "{i} q"}[name]
    assert emb.templates["query"].render("q")[0] == want.format(i=prof.instruction)
    assert emb.pooling == prof.pooling and emb.padding_side == prof.padding_side
    assert emb.bidirectional == prof.bidirectional
    fp = emb.fingerprint()
    assert fp["profile"] == name and fp["family"] == "pretrained"
    no_instruction = get_embedder("pretrained", tiny_model, profile=name, instruction="", append_token="", progress=False)
    assert no_instruction.templates["query"].render("q")[0] == prof.document_template.format(text="q")


def test_unknown_profile_and_bad_templates_are_clear_errors(tiny_model):
    with pytest.raises(InvalidInputError, match="unknown pretrained profile"):
        get_embedder("pretrained", tiny_model, profile="no-such-model")
    with pytest.raises(InvalidInputError, match="exactly once"):
        get_embedder("pretrained", tiny_model, query_template="Query: {instruction}")
    with pytest.raises(InvalidInputError, match="not one token"):
        get_embedder("pretrained", tiny_model, append_token="<|endoftext|>")


# ------------------------------------------------------------------ adapters merged over a base (LLM2Vec)

def test_peft_adapters_are_merged_into_the_backbone_in_order(tmp_path, tiny_tokenizer):
    from peft import LoraConfig, get_peft_model

    base, base_model = _save(tmp_path, "base", "mistral", tiny_tokenizer, tie=False, with_head=True)
    adapters, merged = [], _save(tmp_path, "ref", "mistral", tiny_tokenizer, tie=False, with_head=True)[1].model
    for j in range(2):
        torch.manual_seed(10 + j)
        peft = get_peft_model(_save(tmp_path, f"work{j}", "mistral", tiny_tokenizer, tie=False, with_head=True)[1].model,
                              LoraConfig(r=2, lora_alpha=4, target_modules=["q_proj", "v_proj"]))
        for name, p in peft.named_parameters():
            if "lora_B" in name:
                torch.nn.init.normal_(p, std=0.1)
        peft.save_pretrained(tmp_path / f"adapter{j}")
        adapters.append(str(tmp_path / f"adapter{j}"))
        for name, module in peft.named_modules():  # the reference merge: W + (alpha / r) B A
            if hasattr(module, "lora_A") and "default" in getattr(module, "lora_A", {}):
                delta = module.lora_B["default"].weight @ module.lora_A["default"].weight * module.scaling["default"]
                target = merged.get_submodule(name.split("base_model.model.", 1)[1])
                target.weight.data += delta
    loaded = load_model(f"{base}?adapters={','.join(adapters)}", device="cpu")
    got = dict(loaded.model.get_decoder().named_parameters())
    for name, p in merged.named_parameters():
        torch.testing.assert_close(got[name], p, rtol=1e-5, atol=1e-6)
    assert torch.equal(loaded.lm_head, base_model.lm_head.weight)  # the base's head
    assert [a["source"] for a in loaded.identity["adapters"]] == [str((tmp_path / f"adapter{j}").resolve()) for j in range(2)]


# ------------------------------------------------------------------ an index end to end

@pytest.mark.e2e  # an index built and searched end to end
def test_index_with_a_base_head_searches_end_to_end(tmp_path, tiny_tokenizer):
    from alignir.retrieval.indexer import build_index
    from alignir.retrieval.searcher import Searcher

    emb_folder, _ = _save(tmp_path, "embedder", "qwen3", tiny_tokenizer, tie=False, with_head=False, seed=3)
    base, _ = _save(tmp_path, "base", "qwen3", tiny_tokenizer, tie=False, with_head=True, seed=4)
    corpus = write_corpus(tmp_path / "corpus.jsonl", TINY_CORPUS)
    opts = {"lm_head_from": str(base), "pooling": "last", "padding_side": "left", "append_token": "<eos>",
            "query_template": "Instruct: {instruction}\nQuery:{text}", "instruction": ""}
    manifest = build_index(corpus, tmp_path / "idx", model=str(emb_folder), embedder="pretrained",
                           embedder_options=opts, device="cpu", progress=False, cache_dir=tmp_path / "cache",
                           passages="off", calibrate=False)
    spec = manifest["embedder"]
    assert parse_spec(spec["model"]) == (str(emb_folder.resolve()), {"lm_head_from": str(base.resolve())})
    assert "lm_head_from" not in spec["options"]
    assert manifest["encoder"]["model"]["lm_head"]["sha256"]
    s = Searcher.open(tmp_path / "idx", device="cpu")  # rebuilds the same encoder, or refuses
    assert torch.equal(torch.as_tensor(s.sparsifier.lm_head).float(), _tensor(base, "lm_head.weight"))
    for i, text in enumerate(TINY_CORPUS):
        hits = s.search(text, k=3, mode="dense")
        assert hits[0].doc_number == i and hits[0].score == pytest.approx(1.0, abs=1e-4)
    sparse = s.search(TINY_CORPUS[2], k=3, mode="sparse")
    assert sparse and all(np.isfinite(h.score) for h in sparse)
    # the sparse scores are the index's own: the query's aligned-token vector against the stored rows
    qv = s.sparsifier.queries(s.embedder.encode_queries([TINY_CORPUS[2]]), s.embedder.surface_token_ids([TINY_CORPUS[2]]))
    for h in sparse:
        terms, weights = s.index.sparse.doc_vector(h.doc_number)
        dense_row = np.zeros(qv.shape[1], dtype=np.float64)
        dense_row[terms] = weights
        assert h.score == pytest.approx(float(qv[0].toarray()[0] @ dense_row), rel=1e-4, abs=1e-5)


def test_registered_names_resolve_to_the_pretrained_family():
    model, family, opts = resolve_shipped("qwen3-embedding-0.6b", "prompteol", {"max_length": 256}, "prompteol")
    assert (model, family, opts) == ("qwen3-embedding-0.6b", "pretrained", {"max_length": 256, "text_form": "auto",
                                                          "profile": "qwen3-embedding-0.6b"})
    with pytest.raises(InvalidInputError, match="pretrained"):
        resolve_shipped("gritlm-7b", "echo", {}, "prompteol")
    model, family, opts = resolve_shipped("org/e5", "pretrained", {"lm_head_from": "org/base"}, "prompteol")
    assert parse_spec(model) == ("org/e5", {"lm_head_from": "org/base"}) and opts == {"text_form": "auto"}
    assert json.loads(json.dumps(PRETRAINED["e5-mistral-7b-instruct"].lm_head_from)) == "mistralai/Mistral-7B-v0.1"


def test_cli_build_index_with_lm_head_from(tmp_path, tiny_tokenizer):
    from typer.testing import CliRunner

    from alignir.retrieval.cli import app
    from alignir.retrieval.searcher import Searcher

    emb_folder, _ = _save(tmp_path, "embedder", "mistral", tiny_tokenizer, tie=False, with_head=False, seed=5)
    base, _ = _save(tmp_path, "base", "mistral", tiny_tokenizer, tie=False, with_head=True, seed=6)
    corpus = write_corpus(tmp_path / "corpus.jsonl", TINY_CORPUS)
    runner = CliRunner()
    args = ["build-index", str(corpus), "--index", str(tmp_path / "idx"), "--model", str(emb_folder),
            "--embedder", "pretrained", "--device", "cpu", "--passages", "off", "--no-lexical",
            "--cache-dir", str(tmp_path / "cache"), "--embedder-option", "pooling=mean",
            "--embedder-option", "bidirectional=true"]
    failed = runner.invoke(app, args)
    assert failed.exit_code != 0 and "--lm-head-from" in failed.output
    done = runner.invoke(app, [*args, "--lm-head-from", str(base)])
    assert done.exit_code == 0, done.output
    s = Searcher.open(tmp_path / "idx", device="cpu")
    assert torch.equal(torch.as_tensor(s.sparsifier.lm_head), _tensor(base, "lm_head.weight"))
    assert s.embedder.bidirectional and s.embedder.pooling == "mean"
    hit = runner.invoke(app, ["search", TINY_CORPUS[3], "--index", str(tmp_path / "idx"), "--mode", "dense", "-k", "1",
                              "--device", "cpu"])
    assert hit.exit_code == 0 and "d3" in hit.output, hit.output
