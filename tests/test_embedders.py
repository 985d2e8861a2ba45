"""Training-free embedders: mechanics on a tiny random Llama, behaviour on the real SmolLM2."""
import json
import shutil

import numpy as np
import pytest
import torch

from conftest import TINY_CORPUS
from alignir.encoders.embedders import EMBEDDERS, embedder_class, get_embedder
from alignir.encoders.embedders.prompteol import FAMILY_DEFAULTS, PromptEOLEmbedder
from alignir.encoders.templates import INSTRUCTIONS, TEMPLATES, get_template

FAMILIES = list(FAMILY_DEFAULTS)
TEXTS = TINY_CORPUS + ["short", "a b", "Light."]


def _hidden(loaded, ids):
    """Hand path: one unpadded sequence through the backbone, no batching."""
    with torch.inference_mode():
        out = loaded.model.model(input_ids=torch.tensor([ids]))
    return out.last_hidden_state[0].float().numpy()


@pytest.fixture(params=["tiny_model", "tiny_model_bos"])
def loaded(request):
    return request.getfixturevalue(request.param)


# --------------------------------------------------------------------------- mechanics (tiny model)

@pytest.mark.parametrize("family", FAMILIES)
def test_batched_equals_one_by_one(loaded, family):
    # tiny_model pads right (no BOS), tiny_model_bos pads left with BOS (Gemma-like)
    side = loaded.tokenizer.padding_side
    emb = get_embedder(family, loaded, batch_tokens=128, padding_side=side, progress=False)
    batched = emb.encode_documents(TEXTS)
    assert batched.dtype == np.float32 and batched.shape == (len(TEXTS), loaded.hidden_size)
    assert emb.last_stats["n_batches"] > 1  # the budget really split the input
    single = np.stack([emb.encode_documents([t])[0] for t in TEXTS])
    np.testing.assert_allclose(batched, single, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("family", FAMILIES)
def test_padding_side_invariance(loaded, family):
    right = get_embedder(family, loaded, padding_side="right", batch_tokens=128, progress=False).encode_documents(TEXTS)
    left = get_embedder(family, loaded, padding_side="left", batch_tokens=128, progress=False).encode_documents(TEXTS)
    np.testing.assert_allclose(right, left, rtol=1e-4, atol=1e-5)


def test_order_preserved_under_length_sorting(tiny_model):
    emb = get_embedder("mean", tiny_model, batch_tokens=64, progress=False)
    base = emb.encode_documents(TEXTS)
    perm = np.random.default_rng(0).permutation(len(TEXTS))
    np.testing.assert_allclose(emb.encode_documents([TEXTS[i] for i in perm]), base[perm], rtol=1e-4, atol=1e-5)
    # rows differ from each other, so a swapped order could not pass
    assert np.linalg.matrix_rank(base) == len(TEXTS)


def test_prompteol_is_last_token_of_template(loaded):
    emb = get_embedder("prompteol", loaded, progress=False)
    got = emb.encode_documents(TEXTS[:3])
    tok = loaded.tokenizer
    for r, text in enumerate(TEXTS[:3]):
        prompt = f'This sentence: "{text}" means in one word: "'
        H = _hidden(loaded, tok(prompt)["input_ids"])
        np.testing.assert_allclose(got[r], H[-1], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("family", ["mean", "weighted-mean"])
def test_mean_pools_text_tokens_only(loaded, family):
    """BOS (Gemma-style tokenizer) is not part of the pooled text; alpha as in “A Text is Worth Several Tokens” eq.3."""
    emb = get_embedder(family, loaded, progress=False)
    got = emb.encode_documents(TEXTS[:3])
    tok = loaded.tokenizer
    for r, text in enumerate(TEXTS[:3]):
        ids = tok(text)["input_ids"]
        H = _hidden(loaded, ids)
        keep = [j for j, i in enumerate(ids) if i != tok.bos_token_id]
        w = np.ones(len(keep)) if family == "mean" else np.arange(1, len(keep) + 1, dtype=float)
        want = (H[keep] * (w / w.sum())[:, None]).sum(0)
        np.testing.assert_allclose(got[r], want, rtol=1e-4, atol=1e-5)


def test_echo_pools_second_copy(tiny_model):
    emb = get_embedder("echo", tiny_model, progress=False)
    text = TEXTS[0]
    got = emb.encode_documents([text])[0]
    tok = tiny_model.tokenizer
    prompt = f"Rewrite the sentence: {text}, rewritten sentence: {text}"
    enc = tok(prompt, return_offsets_mapping=True)
    start = prompt.rindex(text)
    keep = [j for j, (a, b) in enumerate(enc["offset_mapping"]) if b > a and b > start]
    H = _hidden(tiny_model, enc["input_ids"])
    np.testing.assert_allclose(got, H[keep].mean(0), rtol=1e-4, atol=1e-5)
    # and it differs from pooling the whole prompt
    assert not np.allclose(got, H.mean(0), atol=1e-4)


def test_truncation_keeps_template_suffix(loaded):
    long = " ".join(TINY_CORPUS) * 20
    emb = get_embedder("prompteol", loaded, max_length=48, progress=False)
    ids, _, _, n_trunc = emb.prepare([long, "short"], "document")
    assert n_trunc == 1
    assert len(ids[0]) <= 48
    assert ids[0][-3:] == ids[1][-3:]  # both end in the template's `means in one word: "`
    v = emb.encode_documents([long, "short"])
    assert emb.last_stats["n_truncated"] == 1 and np.isfinite(v).all()
    assert emb.last_stats["n_tokens"] <= 48 + len(ids[1])


def test_max_length_too_small_for_template(tiny_model):
    emb = get_embedder("prompteol", tiny_model, max_length=4, batch_tokens=64, progress=False)
    with pytest.raises(ValueError, match="leaves no room"):
        emb.encode_documents(["hello"])


def test_empty_and_whitespace(loaded):
    emb = get_embedder("prompteol", loaded, progress=False)
    ref = emb.encode_documents(TEXTS[:2])
    got = emb.encode_documents([TEXTS[0], "", " \n\t ", TEXTS[1]])
    assert emb.last_stats["n_empty"] == 2
    np.testing.assert_array_equal(got[1:3], 0.0)
    np.testing.assert_allclose(got[[0, 3]], ref, rtol=1e-4, atol=1e-5)
    only_empty = emb.encode_documents(["", "  "])
    assert only_empty.shape == (2, loaded.hidden_size) and not only_empty.any()
    strict = get_embedder("prompteol", loaded, empty="error", progress=False)
    with pytest.raises(ValueError, match=r"2 empty or whitespace-only texts \(positions \[1, 2\]"):
        strict.encode_documents([TEXTS[0], "", " "])


def test_bad_inputs(tiny_model):
    emb = get_embedder("prompteol", tiny_model, progress=False)
    with pytest.raises(ValueError, match="decode bytes"):
        emb.encode_documents(["ok", b"\xff\xfe"])
    with pytest.raises(ValueError, match="not a single string"):
        emb.encode_queries("a lone string")
    with pytest.raises(ValueError, match="texts\\[1\\] is NoneType"):
        emb.encode_documents(["ok", None])
    assert emb.encode_documents([]).shape == (0, tiny_model.hidden_size)
    with pytest.raises(ValueError, match="unknown embedder 'nope'"):
        get_embedder("nope", tiny_model)
    with pytest.raises(ValueError, match="unknown pooling"):
        get_embedder("prompteol", tiny_model, pooling="max")
    with pytest.raises(ValueError, match="padding_side"):
        get_embedder("prompteol", tiny_model, padding_side="middle")
    with pytest.raises(ValueError, match="batch_tokens must be a positive int"):
        get_embedder("prompteol", tiny_model, batch_tokens=0)
    with pytest.raises(ValueError, match="unknown template"):
        get_embedder("prompteol", tiny_model, template="no placeholder")
    with pytest.raises(ValueError, match="LoadedModel or a model spec"):
        get_embedder("prompteol", 42)
    with pytest.raises(ValueError, match="takes no adapter"):
        get_embedder("mean", tiny_model, adapter="/some/lora")


def test_unicode_text_is_fine(tiny_model):
    emb = get_embedder("prompteol", tiny_model, progress=False)
    v = emb.encode_documents(["naïve café — 光合作用 \U0001F331", "x\udcff"])  # lone surrogate survives
    assert np.isfinite(v).all() and emb.last_stats["n_empty"] == 0


def test_instructions_apply_to_queries(tiny_model):
    plain = get_embedder("prompteol", tiny_model, progress=False)
    np.testing.assert_allclose(plain.encode_queries(TEXTS[:2]), plain.encode_documents(TEXTS[:2]), rtol=1e-5, atol=1e-6)
    inst = get_embedder("prompteol", tiny_model, instruction="SciFact", progress=False)
    assert inst.fingerprint()["query_instruction"] == INSTRUCTIONS["scifact"]
    assert INSTRUCTIONS["scifact"] == "Given a scientific claim, retrieve documents that support or refute the claim"
    q, d = inst.encode_queries(TEXTS[:2]), inst.encode_documents(TEXTS[:2])
    assert not np.allclose(q, d, atol=1e-4)
    np.testing.assert_allclose(d, plain.encode_documents(TEXTS[:2]), rtol=1e-5, atol=1e-6)
    # the instruction is a prefix line; mean pooling still reads only the text
    custom = get_embedder("mean", tiny_model, instruction="Find it", progress=False)
    tok = tiny_model.tokenizer
    prompt = "Find it\n" + TEXTS[0]
    enc = tok(prompt, return_offsets_mapping=True)
    keep = [j for j, (a, b) in enumerate(enc["offset_mapping"]) if b > a and b > len("Find it\n")]
    H = _hidden(tiny_model, enc["input_ids"])
    np.testing.assert_allclose(custom.encode_queries([TEXTS[0]])[0], H[keep].mean(0), rtol=1e-4, atol=1e-5)


def test_fingerprint(tiny_model):
    a = get_embedder("prompteol", tiny_model)
    fp = a.fingerprint()
    assert json.loads(json.dumps(fp, sort_keys=True)) == fp
    assert fp["template"] == TEMPLATES["prompteol"].pattern and fp["pooling"] == "last"
    assert fp["model"]["name"] == "tiny-llama"
    assert get_embedder("prompteol", tiny_model, batch_tokens=999).fingerprint() == fp  # batching is not identity
    for other in (get_embedder("mean", tiny_model), get_embedder("prompteol", tiny_model, max_length=128),
                  get_embedder("prompteol", tiny_model, instruction="arguana")):
        assert other.fingerprint() != fp


def test_template_render_spans():
    t = get_template("echo")
    prompt, (s, e) = t.render("abc", instruction="Do X")
    assert prompt == "Do X\nRewrite the sentence: abc, rewritten sentence: abc" and prompt[s:e] == "abc"
    assert s == prompt.rindex("abc")
    custom = get_template("Q: {text} A:")
    assert custom.render("hi")[0] == "Q: hi A:"


def test_registry_names_and_targets():
    for name in FAMILIES:
        assert embedder_class(name).family == name
    assert EMBEDDERS["autoregembed"] == "alignir.encoders.embedders.autoregembed:AutoRegEmbedEmbedder"
    assert EMBEDDERS["llm2comp"] == "alignir.encoders.embedders.llm2comp:LLM2CompEmbedder"
    assert EMBEDDERS["gircse"] == "alignir.encoders.embedders.gircse:GircseEmbedder"


def test_get_embedder_from_spec_string(tiny_model, tmp_path):
    tiny_model.model.save_pretrained(tmp_path)
    tiny_model.tokenizer.save_pretrained(tmp_path)
    emb = get_embedder("prompteol", str(tmp_path), device="cpu", progress=False)
    ref = get_embedder("prompteol", tiny_model, progress=False)
    np.testing.assert_allclose(emb.encode_documents(TEXTS[:3]), ref.encode_documents(TEXTS[:3]), rtol=1e-5, atol=1e-6)
    assert emb.fingerprint()["model"]["sha256"]


# --------------------------------------------------------------------------- real SmolLM2

def _top_tokens(loaded, h, k=20):
    logits = loaded.lm_head.float() @ torch.from_numpy(h)
    logits[torch.from_numpy(loaded.special_ids.astype(np.int64))] = -float("inf")
    ids = torch.topk(logits, k).indices.tolist()
    return [loaded.tokenizer.decode([i]).strip().lower() for i in ids]


@pytest.fixture(scope="module")
def smol_eol(smollm2):
    return get_embedder("prompteol", smollm2, progress=False)


@pytest.mark.model
def test_smollm2_photosynthesis_aligns_with_content_words(smollm2, smol_eol):
    h = smol_eol.encode_documents(
        ["Photosynthesis in green plants uses sunlight to turn carbon dioxide and water into sugar."]
    )[0]
    top = _top_tokens(smollm2, h)
    content = {"photos", "photosynthesis", "photo", "plant", "plants", "light", "sunlight", "sun", "solar",
               "carbon", "co", "glucose", "sugar", "oxygen", "energy", "green", "leaf", "leaves", "chlorophyll"}
    assert content & set(top), top


@pytest.mark.model
def test_smollm2_related_pairs_score_higher(smol_eol):
    a = ["The heart pumps blood through the arteries and veins.",
         "Interest rates were raised by the central bank to fight inflation.",
         "The striker scored twice in the football match on Saturday."]
    b = ["Cardiac muscle contracts to circulate blood around the body.",
         "Monetary policy tightened as the bank increased borrowing costs.",
         "The soccer team won the game with two goals from its forward."]
    A = smol_eol.encode_queries(a)
    B = smol_eol.encode_documents(b)
    A /= np.linalg.norm(A, axis=1, keepdims=True)
    B /= np.linalg.norm(B, axis=1, keepdims=True)
    S = A @ B.T
    for i in range(3):
        assert S[i, i] > np.delete(S[i], i).max(), S


@pytest.mark.model
def test_truncation_fits_when_a_character_is_several_tokens(smollm2):
    """'⁺' is two byte-level tokens with one offset span: cutting at a token end inside it kept
    the whole character and a SciFact abstract could never fit (regression)."""
    texts = ["cells " * 498 + "of CD8⁺ T cells in type 1 diabetes", "CD8⁺ " * 50]
    # the old cut failed at 513 on the first text and at 22, 26, ..., 42 on the second
    for max_length in (513, *range(20, 44)):
        emb = get_embedder("prompteol", smollm2, max_length=max_length, progress=False)
        ids, pos, _, n_trunc = emb.prepare(texts, "document")
        assert n_trunc == (1 if max_length == 513 else 2)
        assert all(0 < len(x) <= max_length for x in ids) and all(pos)


@pytest.mark.model
def test_smollm2_batched_equals_single_and_truncates(smollm2):
    emb = get_embedder("prompteol", smollm2, max_length=64, progress=False)
    texts = ["Short one.", "A somewhat longer sentence about the rings of Saturn and its moons.",
             "Saturn's rings are made of ice. " * 30]
    batched = emb.encode_documents(texts)
    assert emb.last_stats["n_truncated"] == 1 and emb.last_stats["n_tokens"] <= 3 * 64
    single = np.stack([emb.encode_documents([t])[0] for t in texts])
    np.testing.assert_allclose(batched, single, rtol=1e-3, atol=1e-3)
    cos = (batched * single).sum(1) / np.linalg.norm(batched, axis=1) / np.linalg.norm(single, axis=1)
    assert cos.min() > 0.9999


@pytest.mark.e2e  # torch.compile runs the C++ compiler
@pytest.mark.skipif(shutil.which("cc") is None, reason="torch.compile on a CPU needs a C compiler")
def test_compiled_forward_gives_the_eager_vectors(tiny_model):
    """``compile=True`` runs the full forward through torch.compile (dynamic shapes: one graph
    for batches of every size and length) and gives the eager vectors, under the same fingerprint."""
    texts = [t * (1 + i % 3) for i, t in enumerate(TINY_CORPUS)]
    eager = PromptEOLEmbedder(tiny_model, progress=False, max_batch_size=3)
    compiled = PromptEOLEmbedder(tiny_model, progress=False, max_batch_size=3, compile=True)
    want = eager.encode_documents(texts)
    np.testing.assert_allclose(compiled.encode_documents(texts), want, rtol=1e-4, atol=1e-5)
    assert compiled.last_stats["n_batches"] > 1
    assert compiled._compiled is not None and compiled._compiled[0] is compiled._backbone
    assert compiled.fingerprint() == eager.fingerprint()
