"""Explanations show the text a token stands for (a leading space as ␣, a piece of a UTF-8
character as its bytes), and keep the raw piece and token id in --json."""
from __future__ import annotations

import json

import pytest

from alignir.encoders.aligned import SPACE_MARK, token_text
from alignir.retrieval.config import SparseConfig
from alignir.retrieval.indexer import build_index
from alignir.retrieval.searcher import Searcher

from conftest import share_model_cache, TINY_CORPUS, write_corpus

pytestmark = pytest.mark.usefixtures("one_thread")


def _id(tok, piece):
    i = tok.convert_tokens_to_ids(piece)
    assert i is not None and i != tok.unk_token_id, piece
    return i


def test_byte_level_pieces_read_as_text(tiny_tokenizer):
    tok = tiny_tokenizer
    vocab = sorted(tok.get_vocab())
    word = next(p for p in vocab if p.startswith("Ġ") and p[1:].isascii() and p[1:].isalpha() and len(p) > 3)
    assert token_text(tok, _id(tok, word)) == SPACE_MARK + word[1:]
    plain = next(p for p in vocab if p.isascii() and p.isalpha() and len(p) > 2)  # "Ġ" is a letter too
    assert token_text(tok, _id(tok, plain)) == plain
    # "ð" and "Ł" stand for the bytes f0 and 9f (the first bytes of an emoji): no text of their own
    assert token_text(tok, _id(tok, "ð")) == "⟨bytes f0⟩"
    assert token_text(tok, _id(tok, "Ł")) == "⟨bytes 9f⟩"
    assert token_text(tok, _id(tok, "Ċ")) == "\\n"  # a newline shown escaped
    assert token_text(tok, _id(tok, "ć")) == "\\x07"  # a control character too


def test_search_explanations_carry_text_piece_and_id(tmp_path, tiny_model):
    corpus = write_corpus(tmp_path / "corpus.jsonl", TINY_CORPUS)
    build_index(corpus, tmp_path / "idx", model="tiny", sparse=SparseConfig().with_changes(doc_k=24, query_m=5,
                fold=False), loaded=tiny_model, cache_dir=tmp_path / "cache", progress=False)
    s = Searcher.open(tmp_path / "idx", loaded=tiny_model)
    hits = s.search("light and carbon in plants", k=3, mode="sparse", explain=True)
    terms = [c for h in hits for c in h.explanation]
    import scipy.sparse as sp

    for d in range(len(TINY_CORPUS)):  # each document explained against its own terms: every one of them
        t, w = s.index.sparse.doc_vector(d)
        terms += s.explain(sp.csr_matrix((w, t, [0, len(t)]), shape=(1, s.index.sparse.n_terms)), d)
    assert terms
    tok = tiny_model.tokenizer
    for c in terms:
        assert c.token is not None and c.string == s.sparsifier.term_map.term_strings[c.term]
        assert c.text == token_text(tok, c.token)
        assert "Ġ" not in c.text
    assert any(c.string.startswith("Ġ") and c.text.startswith(SPACE_MARK) for c in terms)


def test_cli_json_keeps_the_raw_piece(tmp_path, tiny_folder, monkeypatch):
    from typer.testing import CliRunner

    from alignir.retrieval.cli import app

    monkeypatch.setenv("ALIGNIR_CACHE", str(tmp_path / "cache"))
    share_model_cache(tmp_path / "cache")  # the run's converted models and ONNX exports
    model_dir = tiny_folder  # the run's one copy of tiny_model, so its ONNX export is made once
    corpus = write_corpus(tmp_path / "corpus.jsonl", TINY_CORPUS)
    runner = CliRunner()
    r = runner.invoke(app, ["build-index", str(corpus), "--index", str(tmp_path / "idx"), "--model", str(model_dir),
                            "--doc-k", "24", "--query-m", "5", "--no-fold"], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    args = ["search", "the stock market and interest rates", "--index", str(tmp_path / "idx"), "--mode", "sparse",
            "--top", str(len(TINY_CORPUS)), "--explain", "--device", "cpu"]
    r = runner.invoke(app, [*args, "--json"], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    matched = [m for h in json.loads(r.output)["hits"] for m in h["matched"]]
    assert matched and all({"term", "text", "token_id"} <= set(m) for m in matched)
    assert all(m["text"] == SPACE_MARK + m["term"][1:] for m in matched
               if m["term"][:1] == "Ġ" and m["term"][1:].isascii() and m["term"][1:].isalpha())
    assert not any("Ġ" in m["text"] for m in matched)
    r = runner.invoke(app, args, catch_exceptions=False, env={"COLUMNS": "300"})
    assert r.exit_code == 0 and "Ġ" not in r.output
