"""Inference of the trained embedders on a tiny random Llama (and once on the real SmolLM2)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from alignir.encoders.embedders.autoregembed import AutoRegEmbedEmbedder
from alignir.encoders.embedders.gircse import GircseEmbedder, generate_soft_tokens
from alignir.encoders.embedders.llm2comp import LLM2CompEmbedder, encoder_states
from alignir.encoders.models import backbone
from alignir.encoders.embedders.generative import left_pad, pad_id, position_ids, token_ids

from conftest import TINY_CORPUS

pytestmark = pytest.mark.usefixtures("one_thread")


FAMILIES = [AutoRegEmbedEmbedder, LLM2CompEmbedder, GircseEmbedder]


def _ids(loaded, texts):
    rows = [token_ids(loaded.tokenizer, t) for t in texts]
    return left_pad(rows, pad_id(loaded.tokenizer))


@pytest.mark.parametrize("cls", FAMILIES)
@pytest.mark.parametrize("which", ["tiny_model", "tiny_model_bos"])
def test_batching_and_padding_do_not_change_vectors(cls, which, request):
    loaded = request.getfixturevalue(which)
    emb = cls(loaded, batch_size=4)
    together = emb.encode_documents(TINY_CORPUS)
    alone = np.concatenate([emb.encode_documents([t]) for t in TINY_CORPUS])
    assert together.shape == (len(TINY_CORPUS), 32) and together.dtype == np.float32
    np.testing.assert_allclose(together, alone, atol=1e-5)
    assert np.isfinite(together).all()
    assert emb.encode_queries([]).shape == (0, 32)


@pytest.mark.parametrize("cls", FAMILIES)
def test_bad_options_raise(cls, tiny_model, tmp_path):
    with pytest.raises(ValueError, match="unknown option"):
        cls(tiny_model, nonsense=1)
    with pytest.raises(ValueError, match="adapter"):
        cls(tiny_model, adapter=str(tmp_path))  # not a peft directory
    with pytest.raises(ValueError, match=r"texts\[0\] is bytes, expected str \(decode bytes to str first\)"):
        cls(tiny_model).encode_documents([b"bytes"])


def test_autoregembed_roles_use_i_next_and_i_self(tiny_model):
    emb = AutoRegEmbedEmbedder(tiny_model)
    q = emb.encode_queries(TINY_CORPUS[:2])
    d = emb.encode_documents(TINY_CORPUS[:2])
    assert not np.allclose(q, d, atol=1e-4)
    last = AutoRegEmbedEmbedder(tiny_model, pooling="last").encode_documents(TINY_CORPUS[:2])
    assert not np.allclose(last, d, atol=1e-4)
    with pytest.raises(ValueError, match="k"):
        AutoRegEmbedEmbedder(tiny_model, k=0)


def test_llm2comp_bidirectional_mask_is_bidirectional(tiny_model):
    model = tiny_model.model
    a, b = "Proteins fold into structures by sequence", "Proteins fold into structures by chance"
    ids, mask = _ids(tiny_model, [a, b])
    assert mask.all()  # same length: no padding, only the last word differs
    with torch.no_grad():
        bi = encoder_states(model, ids, mask, None, bidirectional=True)
        ca = encoder_states(model, ids, mask, None, bidirectional=False)
        plain = backbone(model)(input_ids=ids, attention_mask=mask).last_hidden_state
    n_same = int((ids[0] == ids[1]).long().cumprod(0).sum())  # length of the common prefix
    assert n_same >= 3
    # bidirectional: a later token changes the earliest state
    assert (bi[0, 0] - bi[1, 0]).abs().max() > 1e-4
    # causal (off): earlier states are untouched and equal the unmodified causal LM
    torch.testing.assert_close(ca[0, :n_same], ca[1, :n_same], atol=1e-6, rtol=0)
    torch.testing.assert_close(ca, plain, atol=1e-5, rtol=1e-5)
    e_bi = LLM2CompEmbedder(tiny_model).encode_documents([a])
    e_ca = LLM2CompEmbedder(tiny_model, bidirectional=False).encode_documents([a])
    assert not np.allclose(e_bi, e_ca, atol=1e-4)


def test_gircse_kv_cache_equals_no_cache(tiny_model_bos):
    ids, mask = _ids(tiny_model_bos, TINY_CORPUS[:4])
    with torch.no_grad():
        G1, S1 = generate_soft_tokens(tiny_model_bos.model, ids, mask, K=6, use_cache=True, return_soft=True)
        G0, S0 = generate_soft_tokens(tiny_model_bos.model, ids, mask, K=6, use_cache=False, return_soft=True)
    assert G1.shape == (4, 6, 32) and S1.shape == (4, 6, tiny_model_bos.vocab_size)
    torch.testing.assert_close(G1, G0, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(S1, S0, atol=1e-6, rtol=1e-4)


def test_gircse_soft_token_is_explicit_convex_combination(tiny_model):
    """s_1 = softmax of the LM's own next-token logits (eq.5); feeding d_k = Σ_i s_k,i e_i, built
    here by an explicit loop over the vocabulary, reproduces the generated states G (eq.6, Alg.1)."""
    model = tiny_model.model
    text = TINY_CORPUS[0]
    ids, mask = _ids(tiny_model, [text])
    K = 3
    with torch.no_grad():
        G, S = generate_soft_tokens(model, ids, mask, K=K, use_cache=True, return_soft=True)
        logits = model(input_ids=ids).logits[0, -1]
        torch.testing.assert_close(S[0, 0], torch.softmax(logits, -1), atol=1e-6, rtol=1e-4)
        E = model.get_input_embeddings().weight
        D = []
        for k in range(K):
            d = torch.zeros(E.shape[1])
            for i in range(E.shape[0]):
                d += S[0, k, i] * E[i]
            D.append(d)
        X = torch.cat([model.get_input_embeddings()(ids)[0], torch.stack(D)]).unsqueeze(0)
        m = torch.ones(X.shape[:2], dtype=torch.long)
        H = backbone(model)(inputs_embeds=X, attention_mask=m, position_ids=position_ids(m)).last_hidden_state
    torch.testing.assert_close(H[0, -K:], G[0], atol=1e-5, rtol=1e-4)
    emb = GircseEmbedder(tiny_model, K=K).encode_documents([text])
    np.testing.assert_allclose(emb[0], G[0].mean(0).numpy(), atol=1e-5)


def test_gircse_k_is_a_test_time_option(tiny_model):
    e3 = GircseEmbedder(tiny_model, K=3)
    e5 = GircseEmbedder(tiny_model, K=5)
    a, b = e3.encode_documents(TINY_CORPUS[:2]), e5.encode_documents(TINY_CORPUS[:2])
    assert not np.allclose(a, b, atol=1e-5)
    assert e3.fingerprint() != e5.fingerprint()
    assert GircseEmbedder(tiny_model, K=3, use_cache=False).fingerprint() == e3.fingerprint()
    with pytest.raises(ValueError, match="K"):
        GircseEmbedder(tiny_model, K=0)


@pytest.mark.model
def test_gircse_and_llm2comp_on_smollm2(smollm2):
    texts = ["Photosynthesis makes glucose.", "Interest rates rose again this year."]
    ids, mask = _ids(smollm2, texts)
    with torch.no_grad():
        G1 = generate_soft_tokens(smollm2.model, ids, mask, K=3, use_cache=True)
        G0 = generate_soft_tokens(smollm2.model, ids, mask, K=3, use_cache=False)
    torch.testing.assert_close(G1, G0, atol=2e-4, rtol=1e-3)
    v = LLM2CompEmbedder(smollm2, k=2).encode_documents(texts)
    assert v.shape == (2, smollm2.hidden_size) and np.isfinite(v).all()


@pytest.mark.e2e  # a child Python process
def test_inference_embedders_do_not_import_training_code():
    """The embedders (and the adapters they read) are inference code; encoders/train builds on
    them, never the reverse."""
    import subprocess
    import sys

    code = ("import sys\n"
            "import alignir.encoders.embedders.autoregembed, alignir.encoders.embedders.gircse\n"
            "import alignir.encoders.embedders.llm2comp, alignir.encoders.embedders.infonce\n"
            "from alignir.encoders.embedders import embedder_class\n"
            "[embedder_class(n) for n in ('autoregembed', 'gircse', 'llm2comp', 'infonce')]\n"
            "print(sorted(m for m in sys.modules if m.startswith(('alignir.encoders.train', 'encoders'))))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd="/")
    assert out.stdout.strip() == "[]", out.stdout


def test_gircse_instruction_format(tiny_model):
    """GIRCSE §4.1: queries read ``Instruct: {task}\\nQuery: {q}``, documents their raw text;
    ``prompteol`` wraps texts in the PromptEOL template; adapters saved before the option read ``plain``."""
    from alignir.encoders.embedders.gircse import gircse_input_ids

    tok = tiny_model.tokenizer
    task, q = "Given a claim, retrieve documents", "The quick brown fox"
    dec = tok.decode(gircse_input_ids(tok, q, task, 64, "instruct"))
    assert dec == f"Instruct: {task}\nQuery: {q}"
    assert tok.decode(gircse_input_ids(tok, q, None, 64, "instruct")) == q  # documents: no instruction
    assert tok.decode(gircse_input_ids(tok, q, None, 64, "prompteol")) == f'This sentence: "{q}" means in one word: "'
    assert tok.decode(gircse_input_ids(tok, q, task, 64, "plain")) == f"{task}\n{q}"
    with pytest.raises(ValueError, match="prompt"):
        gircse_input_ids(tok, q, task, 64, "chat")
    e_instr = GircseEmbedder(tiny_model, K=2, instruction=task)
    e_plain = GircseEmbedder(tiny_model, K=2, instruction=task, prompt="plain")
    assert e_instr.options["prompt"] == "instruct" and e_instr.fingerprint() != e_plain.fingerprint()
    assert not np.allclose(e_instr.encode_queries([q]), e_plain.encode_queries([q]), atol=1e-6)
    # documents read the same in both formats, so the default keeps the fingerprint of uninstructed runs
    np.testing.assert_allclose(e_instr.encode_documents([q]), e_plain.encode_documents([q]), rtol=0, atol=0)
    assert GircseEmbedder(tiny_model, K=2).fingerprint() == GircseEmbedder(tiny_model, K=2, prompt="plain").fingerprint()
