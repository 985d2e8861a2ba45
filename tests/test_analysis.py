"""encoders.analysis: Hit@K / LAR / GAR (“A Text is Worth Several Tokens” eq.6-8), spectral variation (eq.9-12),
PC1 sweep (eq.14), report + plots, and the ``alignir analyze`` command."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from alignir.encoders.aligned import svd_basis
from alignir.encoders.analysis import (
    LITERAL,
    NOVEL,
    STEM,
    TokenMatcher,
    alignment_metrics,
    alignment_table,
    aligned_rankings,
    analyze_embeddings,
    global_alignment_rate,
    hit_at_k,
    lambda_sweep,
    local_alignment_rate,
    pc_contributions,
    surface_sets,
    v1_share,
    variation,
    wordnet_available,
    write_plots,
)

from conftest import write_corpus

# ----------------------------------------------------------------------------- metrics by hand

SURFACE = [np.array([1, 2, 3]), np.array([4, 5]), np.array([], dtype=np.int32), np.array([2, 6, 7, 8])]
RANKED = np.array([
    [9, 1, 10, 3, 11],
    [12, 13, 4, 5, 14],
    [1, 2, 3, 4, 5],  # empty surface set: skipped by every metric
    [2, 6, 15, 16, 7],
])


def test_hit_at_k_by_hand():
    assert hit_at_k(RANKED, SURFACE, 1) == pytest.approx(1 / 3)  # only text 3 (token 2)
    assert hit_at_k(RANKED, SURFACE, 2) == pytest.approx(2 / 3)  # texts 0 and 3
    assert hit_at_k(RANKED, SURFACE, 3) == pytest.approx(1.0)  # text 1 via token 4
    with pytest.raises(ValueError, match="k must be"):
        hit_at_k(RANKED, SURFACE, 6)


def test_lar_and_gar_by_hand():
    # K_i = |T_s|: text0 top3 {9,1,10} ∩ {1,2,3} = {1}; text1 top2 = {} ; text3 top4 ∩ = {2,6}
    assert local_alignment_rate(RANKED, SURFACE) == pytest.approx((1 / 3 + 0 + 2 / 4) / 3)
    # ∪ (T̂^{K_i} ∩ T_s) = {1, 2, 6};  ∪ T_s = {1..8}
    assert global_alignment_rate(RANKED, SURFACE) == pytest.approx(3 / 8)
    m = alignment_metrics(RANKED, SURFACE, k=2)
    assert m["n_texts"] == 3 and m["mean_surface"] == pytest.approx(3.0)
    assert m["hit@2"] == pytest.approx(2 / 3)
    with pytest.raises(ValueError, match="ranking width"):
        local_alignment_rate(RANKED[:, :2], SURFACE)
    with pytest.raises(ValueError, match="surface sets"):
        local_alignment_rate(RANKED[:3], SURFACE)


def _word_tokenizer(words):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = ["<s>", "</s>", "<unk>"] + list(words)
    tk = Tokenizer(models.WordLevel({t: i for i, t in enumerate(vocab)}, unk_token="<unk>"))
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tk.decoder = decoders.ByteLevel()
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, bos_token="<s>", eos_token="</s>", unk_token="<unk>")
    return tok, vocab


WORDS = ["What", "Ġdiseases", "Ġare", "Ġparrots", "Ġprone", "Ġto", "Ġ?", "parrot", "disease", "Ġbirds",
         "Ġsuscept", "Ġthe", ",", "This", "Ġsentence", ":", "Ġ\"", "\"", "Ġmeans", "Ġin", "Ġone", "Ġword",
         "Ġplants", "Ġlight", "Ġcarbon", "Ġand", "Ġuse", "Ġgreen", "Ġleaves", ".", "Plants", "Ġ.", "Ġmake",
         "Ġsugar", "Ġfrom"]


def test_stem_matches_are_the_papers_yellow_tokens():
    tok, vocab = _word_tokenizer(WORDS)
    ids = {w: vocab.index(w) for w in vocab}
    surface = surface_sets(["What diseases are parrots prone to ?"], tok)
    assert set(surface[0].tolist()) == {ids[w] for w in ["What", "Ġdiseases", "Ġare", "Ġparrots", "Ġprone", "Ġto", "Ġ?"]}
    K = len(surface[0])  # 7
    ranked = np.array([[ids["parrot"], ids["Ġbirds"], ids["disease"], ids["Ġsuscept"], ids["Ġthe"], ids[","],
                        ids["Ġare"], ids["Ġto"]]])
    m = TokenMatcher(tok, "stem")
    sset, skeys = set(surface[0].tolist()), m.surface_keys(surface[0])
    assert [m.status(t, sset, skeys) for t in ranked[0, :4]] == [STEM, NOVEL, STEM, NOVEL]
    assert m.status(ids["Ġare"], sset, skeys) == LITERAL
    # exact: top-7 holds "Ġare" only; stem: + parrot, disease
    assert local_alignment_rate(ranked, surface) == pytest.approx(1 / K)
    assert local_alignment_rate(ranked, surface, m) == pytest.approx(3 / K)
    assert global_alignment_rate(ranked, surface) == pytest.approx(1 / K)
    assert global_alignment_rate(ranked, surface, m) == pytest.approx(3 / K)  # are, parrots, diseases
    assert hit_at_k(ranked, surface, 2) == 0.0 and hit_at_k(ranked, surface, 2, m) == 1.0
    out = alignment_metrics(ranked, surface, k=2, matcher=m)
    assert out["hit@2_stem"] == 1.0 and out["lar_stem"] == pytest.approx(3 / K)

    from rich.console import Console

    con = Console(record=True, width=200, color_system=None)
    con.print(alignment_table(["What diseases are parrots prone to ?"], ranked, surface, tok, k=4, matcher=m))
    txt = con.export_text()
    assert "parrot[~]" in txt and "_birds[+]" in txt and "disease[~]" in txt


def test_lemma_mode_uses_wordnet_only_when_installed():
    tok, _ = _word_tokenizer(WORDS)
    m = TokenMatcher(tok, "stem+lemma")
    assert m.lemma == wordnet_available() and m.stem
    with pytest.raises(ValueError, match="match mode"):
        TokenMatcher(tok, "fuzzy")


# ----------------------------------------------------------------------------- spectral


def test_variation_recovers_a_planted_first_component():
    rng = np.random.default_rng(0)
    d = 16
    H = rng.standard_normal((300, d)) + 4.0 * rng.standard_normal(d)  # anisotropic, like LLM embeddings
    U, _ = svd_basis(H)
    u1 = U[:, 0]
    H_hat = H - 3.0 * u1 + 0.01 * rng.standard_normal((300, d))
    v = variation(H_hat, H, U)
    ref = np.array([np.mean([(H_hat[i] - H[i]) @ U[:, j] for i in range(300)]) for j in range(d)])
    np.testing.assert_allclose(v, ref, atol=1e-10)
    assert v[0] == pytest.approx(-3.0, abs=0.01)
    assert v1_share(v) > 0.9
    assert v1_share(np.array([1.0, -1.0, 2.0])) == pytest.approx(0.25)
    with pytest.raises(ValueError, match="same 2-D shape"):
        variation(H_hat[:5], H, U)


def test_pc_contributions_split_eq12():
    rng = np.random.default_rng(1)
    W = rng.standard_normal((40, 8)).astype(np.float32)
    u1 = rng.standard_normal(8)
    u1 /= np.linalg.norm(u1)
    r = rng.standard_normal(8)
    r -= (r @ u1) * u1
    h = (2.5 * u1 + r).astype(np.float32)
    c = pc_contributions(h, W, u1, k=6)
    np.testing.assert_array_equal(c.ids, np.argsort(-(W @ h))[:6])
    np.testing.assert_allclose(c.first, 2.5 * (W @ u1)[c.ids], rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(c.rest, (W @ r)[c.ids], rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(c.total, c.first + c.rest, rtol=1e-5, atol=1e-5)


def test_lambda_sweep_moves_alignment_from_stopword_to_key_token():
    """Hypothesis 1 in miniature: h = 5·u1 + e_key aligns with the 'stopword' token e_0 = u1;
    removing the first component (λ = -5) makes the key token (a surface token) the top-1."""
    d = 6
    E = np.eye(d, dtype=np.float32)[:4] * np.array([[1.0], [1.0], [0.9], [0.8]], dtype=np.float32)
    u1 = np.eye(d, dtype=np.float32)[0]  # token 0 is the stopword direction
    h = (5.0 * u1 + 2.0 * np.eye(d, dtype=np.float32)[1])[None, :]
    surface = [np.array([1, 3])]
    sweep = lambda_sweep(h, u1, E, [0.0, -5.0], surface=surface, k=1)
    assert sweep[0]["ids"][0, 0] == 0 and sweep[0]["metrics"]["hit@1"] == 0.0
    assert sweep[1]["ids"][0, 0] == 1 and sweep[1]["metrics"]["hit@1"] == 1.0
    np.testing.assert_allclose(sweep[1]["logits"][0, 0], 2.0)


# ----------------------------------------------------------------------------- report on a real (tiny) model


def _tiny_loaded(tmp_path=None):
    from transformers import LlamaConfig, LlamaForCausalLM

    from alignir.encoders.models import wrap_model

    tok, vocab = _word_tokenizer(WORDS)
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=len(vocab) + 4, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                      num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=128,
                      tie_word_embeddings=True, bos_token_id=0, eos_token_id=1, pad_token_id=1)
    model = LlamaForCausalLM(cfg).eval()
    if tmp_path is not None:
        model.save_pretrained(tmp_path)
        tok.save_pretrained(tmp_path)
    return wrap_model("tiny", tok, model, {"name": "tiny", "source": "test"}), tok, model


TEXTS = ["What diseases are parrots prone to ?", "Plants use light and carbon .",
         "Plants make sugar from light .", "the green leaves", "birds and plants"]


def test_report_and_plots_on_a_tiny_llama(tmp_path):
    from alignir.encoders.embedders import get_embedder

    loaded, tok, model = _tiny_loaded()
    H = {n: get_embedder(n, loaded, max_length=64, progress=False).encode_documents(TEXTS)
         for n in ("last", "mean", "prompteol")}
    rep = analyze_embeddings(TEXTS, H, tok, loaded.lm_head, loaded.special_ids, k=3)
    s = rep.summary
    json.dumps(s)  # JSON-able
    assert s["spectral"]["base"] == "last" and s["pc1"]["target"] == "prompteol"
    U, _ = svd_basis(H["last"])
    for n in ("mean", "prompteol"):
        v = variation(H[n], H["last"], U)
        assert s["spectral"][n]["v1"] == pytest.approx(v[0], rel=1e-6)
        assert s["embedders"][n]["v1_share"] == pytest.approx(v1_share(v))
    surface = surface_sets(TEXTS, tok, exclude=loaded.special_ids)
    for n, X in H.items():
        ranked = aligned_rankings(X, loaded.lm_head, surface, k=3, mask_ids=loaded.special_ids)
        np.testing.assert_array_equal(ranked, rep.rankings[n])
        assert not np.isin(ranked, loaded.special_ids).any()
        assert s["embedders"][n]["lar"] == pytest.approx(local_alignment_rate(ranked, surface))
        assert s["embedders"][n]["gar"] == pytest.approx(global_alignment_rate(ranked, surface))
    # 'last' pooling + E_g is the LM's own next-token distribution (Process 1 on f)
    enc = tok(TEXTS[0], return_tensors="pt", add_special_tokens=False)
    with torch.no_grad():
        logits = model(**enc).logits[0, -1].numpy()
    logits[loaded.special_ids] = -np.inf
    np.testing.assert_array_equal(rep.rankings["last"][0, :3], np.argsort(-logits, kind="stable")[:3])
    # the sweep at factor 0 is the unadjusted base embedder
    row0 = next(r for r in s["pc1"]["sweep"] if r["factor"] == 0.0)
    assert row0["lar"] == pytest.approx(s["embedders"]["last"]["lar"])
    paths = write_plots(rep, tok, str(tmp_path), prefix="t_", k=3)
    assert len(paths) == 3 + 3
    for p in paths:
        with open(p, "rb") as f:
            assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(ValueError, match="base"):
        analyze_embeddings(TEXTS, H, tok, loaded.lm_head, base="echo")
    with pytest.raises(ValueError, match="rows"):
        analyze_embeddings(TEXTS[:2], H, tok, loaded.lm_head)


def test_analyze_command_on_a_beir_folder(tmp_path):
    import typer
    from typer.testing import CliRunner

    from alignir.retrieval.commands import analyze

    _tiny_loaded(tmp_path / "model")
    beir = tmp_path / "beir"
    beir.mkdir()
    write_corpus(beir / "corpus.jsonl", TEXTS)
    app = typer.Typer()
    app.callback()(lambda: None)  # a command group, as in alignir.retrieval.cli
    analyze.register(app)
    out = tmp_path / "out"
    res = CliRunner().invoke(app, ["analyze", str(beir), "--model", str(tmp_path / "model"), "--n", "4",
                                   "--pooling", "last,prompteol", "--k", "3", "--json", "--out", str(out)])
    assert res.exit_code == 0, res.output
    rep = json.loads(res.stdout)
    assert rep["n_texts"] == 4 and set(rep["embedders"]) == {"last", "prompteol"}
    assert 0.0 <= rep["embedders"]["prompteol"]["gar"] <= 1.0
    assert json.loads((out / "report.json").read_text())["embedders"] == rep["embedders"]
    assert (out / "spectrum.png").is_file() and (out / "embeddings_last.npy").is_file()
    res = CliRunner().invoke(app, ["analyze", str(tmp_path), "--model", str(tmp_path / "model")])
    assert res.exit_code == 2 and "not a BEIR folder" in res.output
    res = CliRunner().invoke(app, ["analyze", str(beir), "--model", str(tmp_path / "model"), "--n", "2",
                                   "--pooling", f"last,last@{tmp_path / 'no-such-adapter'}", "--json"])
    assert res.exit_code == 2 and "error:" in res.output  # a clear message, not a traceback


# ----------------------------------------------------------------------------- the real SmolLM2


@pytest.mark.model
def test_smollm2_alignment_matches_the_models_own_decoding(smollm2):
    from alignir.encoders.embedders import get_embedder

    loaded = smollm2
    texts = ["Photosynthesis lets plants turn sunlight, water and carbon dioxide into sugar.",
             "The stock market fell sharply after the central bank raised interest rates.",
             "Parrots are prone to respiratory diseases and feather plucking.",
             "The spacecraft entered orbit around Mars after a seven month journey."]
    H = {n: get_embedder(n, loaded, max_length=64, progress=False).encode_documents(texts)
         for n in ("last", "prompteol")}
    rep = analyze_embeddings(texts, H, loaded.tokenizer, loaded.lm_head, loaded.special_ids, k=10)
    # last-token pooling through E_g is the LM's own next-token ranking
    enc = loaded.tokenizer(texts[1], return_tensors="pt", add_special_tokens=False)
    with torch.no_grad():
        logits = loaded.model(**enc).logits[0, -1].numpy()
    logits[loaded.special_ids] = -np.inf
    np.testing.assert_array_equal(rep.rankings["last"][1, :5], np.argsort(-logits)[:5])
    # PromptEOL aligns with the texts' own words once case/space variants count (“A Text is Worth Several Tokens” §3.4)
    m = rep.summary["embedders"]["prompteol"]
    assert m["hit@10_stem"] == 1.0
    assert m["lar_stem"] > m["lar"]
