"""Word forms: an index keeps how its corpus writes each word (encoders.word_forms), and the
searcher reads a query's runs of capitals through them ("PRP" -> "PrP"), for the model legs
only; the counts survive the folder and add up when documents are added."""
from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from alignir.encoders.text_form import fold_capitals
from alignir.encoders.word_forms import ARRAYS, MAX_LETTERS, WordForms, natural_case
from alignir.errors import CorruptIndexError
from alignir.index.store import open_index
from alignir.retrieval.indexer import add_documents, build_index
from alignir.retrieval.searcher import Searcher

CORPUS = [
    {"_id": "d0", "title": "Loss of PrP in mice", "text": "Mice without PrP live long, and SIDS is rare in them."},
    {"_id": "d1", "title": "A SURVEY OF PRION DISEASE", "text": "We bred the mice. The survey cites PrP twice."},
    {"_id": "d2", "title": "", "text": "Caenorhabditis worms and the nematode Caenorhabditis elegans carry PrP."},
    {"_id": "d3", "title": "The Effect Of Prions On Mice", "text": "Mice carry prions; SIDS is studied in infants."},
]


def _texts(records):
    return [t for r in records for t in (r["title"], r["text"])]


def _write(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def test_the_counts_skip_sentence_starts_runs_of_capitals_and_title_case():
    forms = WordForms().add_all(_texts(CORPUS))
    # sentence starts ("Loss", "Mice", "We", "The") and the run "A SURVEY OF PRION DISEASE" say nothing
    assert "Loss" not in forms.counts and "SURVEY" not in forms.counts and "We" not in forms.counts
    # a title in Title Case is not natural case: none of its words is counted
    assert "Effect" not in forms.counts and "Prions" not in forms.counts
    assert forms.counts["PrP"] == 4 and forms.counts["SIDS"] == 2 and forms.counts["Caenorhabditis"] == 1
    assert forms.counts["mice"] == 2 and "Mice" not in forms.counts  # "Mice" only opens sentences
    assert forms.most_frequent() == {"prp": "PrP", "sids": "SIDS", "caenorhabditis": "Caenorhabditis"}
    assert forms.form("PRP") == forms.form("prp") == "PrP" and forms.form("mice") is None
    assert forms.form("unknown") is None


def test_which_texts_and_words_count():
    assert natural_case("the cat sat on the Mat".split())
    assert not natural_case("THE CAT SAT".split()) and not natural_case("The Cat Sat On The Mat".split())
    assert not natural_case([])
    forms = WordForms().add_all(["some " + "x" * MAX_LETTERS + " and " + "Y" * (MAX_LETTERS + 1) + " words",
                                 "the 東京 name and ΑΘΗΝΑ written here"])
    assert "x" * MAX_LETTERS in forms.counts and "Y" * (MAX_LETTERS + 1) not in forms.counts
    assert "東京" not in forms.counts  # no cased letter: case has nothing to restore
    assert forms.counts["ΑΘΗΝΑ"] == 1


def test_the_most_frequent_form_wins_lower_case_on_a_tie_in_any_order():
    texts = ["the gene is called prp here", "the gene PrP is here", "a PRP or PrP or prp test"]
    forms = WordForms().add_all(texts)
    assert forms.counts == {**forms.counts, "prp": 2, "PrP": 2, "PRP": 1}
    assert forms.form("prp") is None  # a tie with lower case: lower case
    for order in ([2, 1, 0], [1, 2, 0]):
        assert WordForms().add_all([texts[i] for i in order]).most_frequent() == forms.most_frequent()
    forms.add("one more PrP to count")
    assert forms.form("prp") == "PrP"  # the answer follows the new counts
    # two other forms tied: the first in code-point order, whatever the counting order
    assert WordForms({"Tnf": 1, "TNF": 1}).form("tnf") == WordForms({"TNF": 1, "Tnf": 1}).form("tnf") == "TNF"


def test_counts_add_up_and_round_trip_through_the_arrays():
    # what ``alignir add`` does without the stored texts: the stored counts, then the new documents
    stored = WordForms.from_arrays(WordForms().add_all(_texts(CORPUS[:2])).to_arrays())
    a = stored.add_all(_texts(CORPUS[2:]))
    assert a == WordForms().add_all(_texts(CORPUS))
    arrays = a.to_arrays()
    assert set(arrays) == set(ARRAYS) and arrays[ARRAYS[0]].dtype == np.uint8
    assert WordForms.from_arrays(arrays) == a
    assert WordForms.from_arrays({}) is None
    empty = WordForms().to_arrays()
    assert WordForms.from_arrays(empty) == WordForms() and len(empty[ARRAYS[1]]) == 0
    with pytest.raises(CorruptIndexError, match="counts"):
        WordForms.from_arrays({ARRAYS[0]: arrays[ARRAYS[0]], ARRAYS[1]: arrays[ARRAYS[1]][:-1]})
    with pytest.raises(CorruptIndexError, match="UTF-8"):
        WordForms.from_arrays({ARRAYS[0]: np.array([0xFF, 0xFE], np.uint8), ARRAYS[1]: np.array([1])})
    with pytest.raises(CorruptIndexError, match="types"):
        WordForms.from_arrays({ARRAYS[0]: np.array(["PrP"]), ARRAYS[1]: np.array([1])})


def test_a_run_of_capitals_is_read_in_the_corpus_forms():
    forms = WordForms().add_all(_texts(CORPUS))
    assert fold_capitals("PRP LOSS IN MICE AND SIDS", forms.form) == "PrP loss in mice and SIDS"
    assert fold_capitals("PRP LOSS IN MICE AND SIDS") == "Prp loss in mice and sids"
    # a form at a sentence start gets a capital first letter; words outside runs are untouched
    assert fold_capitals("the sids report. SIDS IN CAENORHABDITIS WORMS", forms.form) == \
        "the sids report. SIDS in Caenorhabditis worms"
    # a form of another length than the word is not used ("ß" -> "SS" in capitals)
    assert fold_capitals("DIE STRASSE IST LANG", WordForms({"Straße": 3}).form) == "Die strasse ist lang"


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("aAbBpPrRsS .?\n-1")), max_size=60),
       st.dictionaries(st.text(alphabet=st.sampled_from(list("abprsABPRS")), min_size=1, max_size=5),
                       st.integers(1, 3), max_size=8))
def test_reading_through_forms_changes_letter_case_only_inside_runs(text, counts):
    forms = WordForms(counts)
    read = fold_capitals(text, forms.form)
    assert len(read) == len(text) and read.lower() == fold_capitals(text).lower()
    assert fold_capitals(read.upper(), forms.form).lower() == read.lower()
    if fold_capitals(text) == text:  # no run of capitals: nothing to read
        assert read == text


def test_an_index_keeps_its_word_forms_and_the_searcher_reads_queries_through_them(tiny_model, tmp_path):
    corpus = _write(tmp_path / "corpus.jsonl", CORPUS)
    build_index(corpus, tmp_path / "auto", model="tiny", loaded=tiny_model, use_cache=False, progress=False,
                calibrate=False)
    build_index(corpus, tmp_path / "off", model="tiny", loaded=tiny_model, use_cache=False, progress=False,
                calibrate=False, text_form="off")
    counted = WordForms().add_all(_texts(CORPUS))
    stored = open_index(tmp_path / "auto")
    assert WordForms.from_arrays(stored.extra) == counted
    assert stored.manifest["params"]["word_forms"] == counted.summary() == {"forms": len(counted.counts),
                                                                            "words_not_lower": 3}
    off = open_index(tmp_path / "off")
    assert WordForms.from_arrays(off.extra) is None and "word_forms" not in off.manifest["params"]  # read as given
    from typer.testing import CliRunner

    from alignir.retrieval.cli import app

    shown = CliRunner().invoke(app, ["info", "--index", str(tmp_path / "auto")])
    assert shown.exit_code == 0 and f"word forms {len(counted.counts)} counted, 3 words" in shown.output
    query = "PRP LOSS IN MICE AND SIDS"
    with Searcher.open(tmp_path / "auto", loaded=tiny_model) as s:
        enc = s.embedder
        through_forms = s.encode([query])
        np.testing.assert_array_equal(through_forms.legs["dense"], enc.encode_queries(["PrP loss in mice and SIDS"]))
        s.word_forms = None  # the fold alone
        folded = s.encode([query])
        np.testing.assert_array_equal(folded.legs["dense"], enc.encode_queries(["Prp loss in mice and sids"]))
        # the aligned-token query vector's surface tokens are those of the text read (eq.16)
        assert (through_forms.legs["sparse"] != folded.legs["sparse"]).nnz > 0
        # BM25 reads the query as given either way
        assert (through_forms.legs["bm25"] != folded.legs["bm25"]).nnz == 0
    with Searcher.open(tmp_path / "off", loaded=tiny_model) as s:
        assert s.word_forms is None
        np.testing.assert_array_equal(s.encode([query]).legs["dense"], s.embedder.encode_queries([query]))


def test_added_documents_count_as_in_a_rebuild(tiny_model, tmp_path):
    cache = tmp_path / "cache"
    kw = dict(model="tiny", loaded=tiny_model, cache_dir=cache, progress=False, calibrate=False, store_text=True)
    build_index(_write(tmp_path / "a.jsonl", CORPUS[:2]), tmp_path / "grown", **kw)
    add_documents(tmp_path / "grown", CORPUS[2:], loaded=tiny_model, cache_dir=cache, progress=False, calibrate=False)
    assert WordForms.from_arrays(open_index(tmp_path / "grown").extra) == WordForms().add_all(_texts(CORPUS))
    # a replaced document is counted again with its new text only (its stored text is at hand)
    changed = {**CORPUS[2], "text": "Worms of the nematode kind."}
    add_documents(tmp_path / "grown", [changed], replace=True, loaded=tiny_model, cache_dir=cache, progress=False,
                  calibrate=False)
    want = WordForms().add_all(_texts([CORPUS[0], CORPUS[1], CORPUS[3], changed]))
    grown = open_index(tmp_path / "grown")
    assert WordForms.from_arrays(grown.extra) == want and grown.manifest["params"]["word_forms"] == want.summary()
    assert "Caenorhabditis" not in want.counts


def test_without_the_stored_texts_the_new_counts_are_added(tiny_model, tmp_path):
    cache = tmp_path / "cache"
    build_index(_write(tmp_path / "a.jsonl", CORPUS[:2]), tmp_path / "idx", model="tiny", loaded=tiny_model,
                cache_dir=cache, progress=False, calibrate=False, legs="dense,sparse")
    (tmp_path / "a.jsonl").unlink()  # the recorded corpus is gone: only the stored counts remain
    add_documents(tmp_path / "idx", CORPUS[2:], loaded=tiny_model, cache_dir=cache, progress=False, calibrate=False)
    assert WordForms.from_arrays(open_index(tmp_path / "idx").extra) == WordForms().add_all(_texts(CORPUS))
