"""Text in any form: runs of capitals are read by the LLM in sentence case (encoders.text_form),
at index and query time alike, while BM25 and the stored text keep the original."""
from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from alignir.encoders.cache import EmbeddingCache
from alignir.encoders.embedders import get_embedder
from alignir.encoders.shipped import resolve_shipped
from alignir.encoders.text_form import capital_runs, check_text_form, fold_capitals, read_text
from alignir.errors import InvalidInputError
from alignir.retrieval.passages import plan_passages

from conftest import share_model_cache, TINY_CORPUS, write_corpus

#: sentence-case texts without names or acronyms: folding their capitals gives them back
NATURAL = [
    "Aerodynamic heating of a flat plate in supersonic flow was measured in a wind tunnel.",
    "Proteins fold into three-dimensional structures. The sequence decides the fold.",
    "Retrieval systems rank documents by their relevance to a query.",
]

FOLDS = {
    "heading and body": ("GAS DYNAMICS OF HYPERSONIC FLOW. The body cites NASA data.",
                         "Gas dynamics of hypersonic flow. The body cites NASA data."),
    "all capitals, two sentences": ("THE PLATE WAS HEATED. IT MELTED QUICKLY!",
                                    "The plate was heated. It melted quickly!"),
    "run inside a sentence": ("the report said WE WILL NOT COMPLY today",
                              "the report said we will not comply today"),
    "quoted sentence start": ('"THE QUICK BROWN FOX"', '"The quick brown fox"'),
    "line break is no sentence end": ("HEATING OF THE\nFLAT PLATE", "Heating of the\nflat plate"),
    "blank line is a sentence end": ("HEATING OF THE\n\nFLAT PLATE", "Heating of the\n\nFlat plate"),
    "digits and hyphens between words": ("COVID-19 VACCINE TRIAL RESULTS", "Covid-19 vaccine trial results"),
    "dotted capital I": ("İSTANBUL İS A CİTY", "İstanbul is a city"),
    "accented capitals": ("ÉTUDE DES MATÉRIAUX ÉLASTIQUES", "Étude des matériaux élastiques"),
}

UNCHANGED = {
    "acronyms": "NASA and the ESA fund DNA studies with the NIH.",
    "a pair of capitalised words": "Flights to NEW YORK were delayed.",
    "title case": "Gas Dynamics Of Hypersonic Flow",
    "three short words": "the US EU UN deal",  # 3 words, 6 letters: under the letter count
    "natural text": TINY_CORPUS[0],
    "mixed case word breaks the run": "THE McDONALD FARM HAS COWS",
    "lower case": "lower case without punctuation",
    "empty": "",
}


@pytest.mark.parametrize("case", sorted(FOLDS))
def test_runs_of_capitals_are_read_in_sentence_case(case):
    text, want = FOLDS[case]
    assert fold_capitals(text) == want
    assert read_text(text, "auto") == want and read_text(text, "off") == text


@pytest.mark.parametrize("case", sorted(set(UNCHANGED) - {"mixed case word breaks the run"}))
def test_acronyms_pairs_and_natural_text_pass_unchanged(case):
    assert fold_capitals(UNCHANGED[case]) == UNCHANGED[case]
    assert capital_runs(UNCHANGED[case]) == []


def test_a_mixed_case_word_ends_a_run():
    # "THE" is a run of one word; "FARM HAS COWS" (3 words, 11 letters) is folded
    assert fold_capitals(UNCHANGED["mixed case word breaks the run"]) == "THE McDONALD farm has cows"


def test_the_text_form_is_checked():
    assert check_text_form("auto") == "auto" and check_text_form("off") == "off"
    with pytest.raises(InvalidInputError, match="text_form"):
        check_text_form("lower")


# ---------------------------------------------------------------- properties

_letters = st.sampled_from(list("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyzİÉéßǅ"))
_gaps = st.sampled_from([" ", "  ", ". ", "! ", "\n", "\n\n", "-", "3", ", ", '"', "("])
_words = st.one_of(st.text(_letters, min_size=1, max_size=9),
                   st.text(st.sampled_from(list("ABCDEFGHIJKLMNOPQRSTUVWXYZİÉ")), min_size=1, max_size=9))
_texts = st.one_of(st.lists(st.tuples(_words, _gaps), max_size=14).map(lambda ws: "".join(a + b for a, b in ws)),
                   st.text(max_size=60))


@settings(max_examples=300, deadline=None)
@given(_texts)
def test_folding_is_idempotent(text):
    once = fold_capitals(text)
    assert fold_capitals(once) == once


@settings(max_examples=300, deadline=None)
@given(_texts)
def test_only_letter_case_changes_and_only_inside_runs(text):
    out = fold_capitals(text)
    assert len(out) == len(text)  # offsets kept
    inside = np.zeros(len(text), dtype=bool)
    for a, b in capital_runs(text):
        inside[a:b] = True
    for i, (was, now) in enumerate(zip(text, out)):
        if was == now:
            continue
        assert inside[i], (text, i)
        assert was.isupper() and now.islower() and now == was.lower()[0], (was, now)


# ---------------------------------------------------------------- the embedder reads the fold

def test_the_model_reads_capitals_as_the_natural_text(tiny_model):
    auto = get_embedder("prompteol", tiny_model, progress=False, text_form="auto")
    off = get_embedder("prompteol", tiny_model, progress=False)
    capitals = [t.upper() for t in NATURAL]
    assert [fold_capitals(t) for t in capitals] == NATURAL
    want = off.encode_documents(NATURAL)
    np.testing.assert_array_equal(auto.encode_documents(capitals), want)
    np.testing.assert_array_equal(auto.encode_queries(capitals), off.encode_queries(NATURAL))
    assert not np.allclose(off.encode_documents(capitals), want)  # as given, capitals read otherwise
    np.testing.assert_array_equal(auto.encode_documents(NATURAL), want)  # natural text: the same vectors
    # the query's own tokens of eq.16 are those of the text read
    for a, b in zip(auto.surface_token_ids(capitals), off.surface_token_ids(NATURAL)):
        np.testing.assert_array_equal(a, b)


def test_the_fingerprint_names_the_text_form_unless_off(tiny_model):
    off = get_embedder("prompteol", tiny_model, progress=False)
    explicit_off = get_embedder("prompteol", tiny_model, progress=False, text_form="off")
    auto = get_embedder("prompteol", tiny_model, progress=False, text_form="auto")
    assert "text_form" not in off.fingerprint() and off.fingerprint() == explicit_off.fingerprint()
    assert auto.fingerprint() == {**off.fingerprint(), "text_form": "auto"}
    # the cache keys vectors by the text read: both share the dense fingerprint
    assert auto.dense_fingerprint() == off.dense_fingerprint()
    with pytest.raises(InvalidInputError, match="text_form"):
        get_embedder("prompteol", tiny_model, text_form="upper")


def test_new_encoders_default_to_auto():
    _, _, opts = resolve_shipped("smollm2-135m-alignir-v4", "prompteol", {})
    assert opts["text_form"] == "auto"
    _, _, opts = resolve_shipped("some/model", "prompteol", {"text_form": "off"})
    assert opts["text_form"] == "off"


def test_the_cache_shares_vectors_between_forms(tiny_model, tmp_path):
    cache = EmbeddingCache(tmp_path / "cache")
    off = get_embedder("prompteol", tiny_model, progress=False)
    auto = get_embedder("prompteol", tiny_model, progress=False, text_form="auto")
    want = cache.encode_cached(off, NATURAL, "document", progress=False)
    got = cache.encode_cached(auto, NATURAL, "document", progress=False)  # natural text keeps its vectors
    assert cache.last_stats["n_encoded"] == 0
    np.testing.assert_array_equal(got, want)
    caps = cache.encode_cached(auto, [t.upper() for t in NATURAL], "document", progress=False)
    assert cache.last_stats["n_encoded"] == 0  # capitals read as the natural text: already there
    np.testing.assert_array_equal(caps, want)
    cache.encode_cached(off, [t.upper() for t in NATURAL], "document", progress=False)
    assert cache.last_stats["n_encoded"] == len(NATURAL)  # read as given: other texts


def test_passages_count_the_tokens_of_the_text_read(tiny_model):
    natural = " ".join(NATURAL * 6)
    capitals = natural.upper()
    tok, budget = tiny_model.tokenizer, 24
    auto = get_embedder("prompteol", tiny_model, progress=False, text_form="auto")
    want = plan_passages([natural], tok, "auto", budget)
    got = plan_passages([capitals], tok, "auto", budget, read=auto.read_texts)
    raw = plan_passages([capitals], tok, "auto", budget)
    assert (got.starts, got.ends, got.counts) == (want.starts, want.ends, want.counts)
    assert got.stats["passage_tokens"] == want.stats["passage_tokens"]
    assert got.texts == [capitals[a:b] for a, b in zip(got.starts, got.ends)]  # spans of the original
    assert raw.counts[0] > want.counts[0]  # counted as given, capitals take more tokens


# ---------------------------------------------------------------- the index

def _caps_corpus(path):
    return write_corpus(path, [t.upper() for t in NATURAL] + TINY_CORPUS[1:4])


def test_an_index_records_the_form_and_bm25_keeps_the_original(tiny_model, tmp_path):
    from alignir.index.store import open_index
    from alignir.retrieval.indexer import build_index
    from alignir.retrieval.searcher import Searcher

    corpus = _caps_corpus(tmp_path / "corpus.jsonl")
    m = build_index(corpus, tmp_path / "auto", model="tiny", loaded=tiny_model, use_cache=False, progress=False,
                    calibrate=False, store_text=True)
    assert m["embedder"]["options"]["text_form"] == "auto" and m["encoder"]["text_form"] == "auto"
    off = build_index(corpus, tmp_path / "off", model="tiny", loaded=tiny_model, use_cache=False, progress=False,
                      calibrate=False, text_form="off")
    assert off["embedder"]["options"]["text_form"] == "off" and "text_form" not in off["encoder"]
    s = Searcher.open(tmp_path / "auto", loaded=tiny_model)
    assert s.embedder.text_form == "auto"
    assert s.doc("d0")["text"] == NATURAL[0].upper()  # stored as given
    # BM25 reads the original text: the same ranking for both forms
    q = "SUPERSONIC WIND TUNNEL"
    bm_auto = [(h.id, h.score) for h in s.search(q, k=5, mode="bm25")]
    bm_off = [(h.id, h.score) for h in Searcher.open(tmp_path / "off", loaded=tiny_model).search(q, k=5, mode="bm25")]
    assert bm_auto == bm_off
    dense = open_index(tmp_path / "auto").dense_vectors
    want = get_embedder("prompteol", tiny_model, progress=False).encode_documents(NATURAL)
    np.testing.assert_allclose(dense[:3], want, rtol=1e-4, atol=1e-5)  # runtime: ONNX vs torch rounding


def test_an_index_built_before_the_option_reads_text_as_given(tiny_model, tmp_path):
    from alignir.index.manifest_io import MANIFEST_CHECKSUM, manifest_digest
    from alignir.retrieval.indexer import build_index
    from alignir.retrieval.searcher import Searcher

    corpus = _caps_corpus(tmp_path / "corpus.jsonl")
    m = build_index(corpus, tmp_path / "idx", model="tiny", loaded=tiny_model, use_cache=False, progress=False,
                    calibrate=False, text_form="off")
    manifest = tmp_path / "idx" / "manifest.json"
    data = json.loads(manifest.read_text())
    del data["embedder"]["options"]["text_form"]  # what an older build wrote, sealed as it sealed it
    data[MANIFEST_CHECKSUM] = manifest_digest(data)
    manifest.write_text(json.dumps(data))
    s = Searcher.open(tmp_path / "idx", loaded=tiny_model)
    assert s.embedder.text_form == "off"
    assert s.embedder.fingerprint() == get_embedder("prompteol", tiny_model, **{
        k: v for k, v in m["embedder"]["options"].items() if k != "text_form"}).fingerprint()
    assert len(s.search("SUPERSONIC WIND TUNNEL", k=3, mode="dense")) == 3


@pytest.mark.e2e  # indexes built through the CLI
def test_the_cli_takes_the_text_form(tiny_folder, tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from alignir.retrieval.cli import app

    monkeypatch.setenv("ALIGNIR_CACHE", str(tmp_path / "cache"))
    share_model_cache(tmp_path / "cache")  # the run's converted models and ONNX exports
    corpus = _caps_corpus(tmp_path / "corpus.jsonl")
    runner = CliRunner()
    r = runner.invoke(app, ["build-index", str(corpus), "--index", str(tmp_path / "idx"), "--model", str(tiny_folder),
                            "--text-form", "off"], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    assert json.loads((tmp_path / "idx" / "manifest.json").read_text())["embedder"]["options"]["text_form"] == "off"
    r = runner.invoke(app, ["build-index", str(corpus), "--index", str(tmp_path / "bad"), "--model", str(tiny_folder),
                            "--text-form", "upper"], catch_exceptions=False)
    assert r.exit_code != 0 and "text_form" in r.output and not (tmp_path / "bad").exists()


# ---------------------------------------------------------------- the benchmark's result file

def _form_row(collection, setting, form, three, dense, model=None):
    row = {"collection": collection, "setting": setting, "text_form": form,
           "ndcg@10": {"bm25": 0.45, "dense": dense, "sparse": 0.5, "dense+sparse+bm25": three}}
    return row if model is None else {**row, "model": model}


def test_the_benchmark_keeps_each_models_rows_and_judges_them_on_its_own_original(tmp_path):
    from benchmarks.quality.text_form import WORK, work_folder, write_result

    out = tmp_path / "text_form.json"
    # a file written before rows named their model: its rows are the file's model's
    out.write_text(json.dumps({"model": "base", "rows": [_form_row("adi", "original", "auto", 0.58, 0.53),
                                                         _form_row("adi", "both-lower", "auto", 0.57, 0.50)]}))
    other = [_form_row("adi", "original", "auto", 0.70, 0.60, "other"),
             _form_row("adi", "both-lower", "auto", 0.69, 0.54, "other")]
    write_result(out, "base", {"command": "other"}, other)
    data = json.loads(out.read_text())
    assert data["model"] == "base"  # the file's model stays the default's
    rows = {(r["model"], r["setting"]): r for r in data["rows"]}
    assert len(data["rows"]) == 4 and [r["model"] for r in data["rows"]] == ["base", "base", "other", "other"]
    assert rows["base", "both-lower"]["goals"]["met"]  # 0.57 vs 0.58, dense 0.50 vs 0.53
    # against its own original (0.70, dense 0.60), not the base's: dense 0.06 under
    assert rows["other", "both-lower"]["goals"]["delta_vs_original"]["dense+sparse+bm25"] == pytest.approx(-0.01)
    assert not rows["other", "both-lower"]["goals"]["dense_within_0.05_of_original"]
    # a row replaces only the row of its own model
    write_result(out, "base", {"command": "base"}, [_form_row("adi", "original", "auto", 0.59, 0.53, "base")])
    data = json.loads(out.read_text())
    rows = {(r["model"], r["setting"]): r for r in data["rows"]}
    assert len(data["rows"]) == 4 and rows["base", "original"]["ndcg@10"]["dense+sparse+bm25"] == 0.59
    assert rows["other", "original"]["ndcg@10"]["dense+sparse+bm25"] == 0.70
    assert [c["command"] for c in data["commands"]] == ["other", "base"]
    assert work_folder("base", "base") == WORK and work_folder("other", "base") != WORK


def test_the_recorded_rows_are_judged_against_their_own_models_original():
    """Each row of the committed result file carries the goals of its own model's original (a
    file last written by an older writer once judged one model's rows by another's original)."""
    from benchmarks.quality.text_form import RESULT, goals

    data = json.loads(RESULT.read_text())
    rows = data["rows"]
    assert all("model" in r for r in rows)
    originals = {(r["model"], r["collection"], r["text_form"]): r for r in rows if r["setting"] == "original"}
    for r in rows:
        original = originals.get((r["model"], r["collection"], r["text_form"]))
        assert r["goals"] == goals(r, original), (r["model"], r["collection"], r["text_form"], r["setting"])


def test_the_case_lexicon_probe_counts_the_words_read_as_written():
    from alignir.encoders.word_forms import WordForms
    from benchmarks.quality.case_lexicon_probe import word_agreement

    forms = WordForms().add_all(["Mice without PrP live long, and SIDS is rare in them."])
    # the fold gives "Prp loss in mice and sids": 2 of 6 words differ from the query as written
    assert word_agreement(["PrP loss in mice and SIDS"], fold_capitals) == pytest.approx(4 / 6, abs=1e-4)
    assert word_agreement(["PrP loss in mice and SIDS"], lambda t: fold_capitals(t, forms.form)) == 1.0
