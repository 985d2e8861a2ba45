"""Built unlabelled corpora (encoders/train/corpus_build.py, corpus_overlap.py): cutting, dropping
and capping records, the written folder read back by the training data mix, and the guard that
refuses a corpus holding a sentence of an evaluation collection."""
from __future__ import annotations

import json
import runpy
from pathlib import Path

import pytest

from alignir.encoders.train.corpus_build import select_records, write_corpus
from alignir.encoders.train.corpus_overlap import OverlapGuard
from alignir.encoders.train.corpus_text import cut_words, sentences
from alignir.encoders.train.mix import load_mix
from alignir.encoders.train.unsupervised import CorpusDoc, load_corpus_docs
from alignir.errors import CorpusOverlapError, InvalidInputError

ROOT = Path(__file__).resolve().parents[1]
EVAL_SENTENCE = "The measured heat transfer rates agree with the theory of laminar boundary layers at hypersonic speeds."


def _collections(root: Path) -> Path:
    folder = root / "datasets" / "aero"
    folder.mkdir(parents=True)
    rows = [{"_id": "1", "title": "heat transfer", "text": "an experimental study . " + EVAL_SENTENCE.lower()
             + " further work is planned ."}]
    (folder / "corpus.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (folder / "queries.jsonl").write_text(json.dumps({"_id": "q1", "text": "what is known about the flow over "
                                                      "a flat plate at high speed ?"}) + "\n")
    return root / "datasets"


def _docs(n: int) -> list[CorpusDoc]:
    topics = ["rivers", "castles", "compilers", "orchards", "glaciers", "violins", "harbours", "comets"]
    return [CorpusDoc(f"d{i}", f"On {topics[i % 8]} number {i}",
                      f"Record {i} talks about {topics[i % 8]} at some length. It has a second sentence about "
                      f"{topics[(i + 3) % 8]} too. A third one closes record {i} for good.") for i in range(n)]


def test_sentences_and_word_cap_on_sentence_boundaries():
    text = "First one here. Second (with a parenthesis) one! Third? 4 cats. \"Quoted\" start."
    assert sentences(text) == ["First one here.", "Second (with a parenthesis) one!", "Third?", "4 cats.",
                               "\"Quoted\" start."]
    assert cut_words(text, 8) == "First one here. Second (with a parenthesis) one!"
    assert cut_words(text, 7) == "First one here."
    assert cut_words("one two three four five. six", 3) == "one two three"


def test_select_records_cuts_drops_duplicates_and_caps_by_id_hash():
    recs = [
        CorpusDoc("a", "  A  title ", "Short. " + " ".join(["word"] * 45) + ". Tail sentence here."),
        CorpusDoc("b", "", "no title at all but plenty of words here"),
        CorpusDoc("c", "Tiny", "too short"),
        CorpusDoc("d", "a title!", "Another text with enough words in it."),        # same title as a
        CorpusDoc("e", "Other", "short. " + " ".join(["word"] * 45) + ". Differs."),  # same first 40 words as a
        CorpusDoc("f", "Same as text", "same as text"),
        CorpusDoc("g", "Good", "A fine record with enough words."),
    ]
    sel = select_records(recs, max_docs=10, max_words=47, min_words=5)
    assert sel.docs == [CorpusDoc("a", "A title", "Short. " + " ".join(["word"] * 45) + "."),
                        CorpusDoc("g", "Good", "A fine record with enough words.")]
    assert sel.counts == {"read": 7, "dropped_title": 1, "dropped_short": 2, "dropped_duplicate": 2, "kept": 2}
    many = _docs(50)
    capped = select_records(many, max_docs=10)
    assert len(capped.docs) == 10 and capped.counts["dropped_cap"] == 40
    assert [d.id for d in capped.docs] == sorted((d.id for d in capped.docs), key=lambda s: int(s[1:]))
    assert capped.docs == select_records(list(reversed(many)), max_docs=10).docs[::-1]  # the ids decide, not the order
    with pytest.raises(InvalidInputError):
        select_records(many, max_docs=0)


def test_written_corpus_loads_and_gives_title_and_crop_pairs(tmp_path):
    guard = OverlapGuard.from_datasets(_collections(tmp_path))
    sel = select_records(_docs(40), max_docs=30)
    info = write_corpus(tmp_path / "out" / "toy", sel, {"name": "toy", "licence": "CC0-1.0"}, guard)
    folder = tmp_path / "out" / "toy"
    assert sorted(p.name for p in folder.iterdir()) == ["SOURCE.json", "corpus.jsonl"]
    assert json.loads((folder / "SOURCE.json").read_text()) == info
    assert info["records"] == 30 and info["licence"] == "CC0-1.0" and info["overlap_check"]["collections"] == {"aero": 2}
    assert info["median_words"] == 24
    docs = load_corpus_docs(folder)
    assert docs == sel.docs
    pairs, desc = load_mix(folder, "title=12,crop=12", corpora=[str(folder)], n_negatives=1, seed=0)
    title, crop = pairs[:12], pairs[12:]
    by_title = {d.title: d.text for d in docs}
    assert all(by_title[p.query] == p.positive for p in title)
    bodies = {d.text for d in docs}
    for p in crop:
        src = next(b for b in bodies if p.query in b and p.positive in b)
        assert p.query != src or p.positive != src
        assert len(p.negatives) == 1
    assert [s["count"] for s in desc["sources"]] == [12, 12]


def test_guard_refuses_a_planted_sentence_and_writes_nothing(tmp_path):
    guard = OverlapGuard.from_datasets(_collections(tmp_path))
    docs = _docs(5)
    planted = CorpusDoc("planted", "Hypersonic flows", "Some opening words, then: the MEASURED heat-transfer rates "
                        "agree with the theory of laminar boundary layers at hypersonic speeds; and more after it.")
    partial = CorpusDoc("partial", "Partial", "The measured heat transfer rates agree with the theory of laminar flow.")
    query = CorpusDoc("query", "What is known about the flow over a flat plate at high speed", "A text of its own words.")
    assert guard.find(partial) is None
    with pytest.raises(CorpusOverlapError) as err:
        write_corpus(tmp_path / "out" / "bad", select_records(docs + [planted, partial, query]), {"name": "bad"}, guard)
    assert [(r, c) for r, c, _ in err.value.overlaps] == [("planted", "aero"), ("query", "aero")]
    assert "planted" in str(err.value) and not (tmp_path / "out" / "bad").exists()
    # asked to, the selection drops those records instead and the corpus lists them
    sel = select_records(docs + [planted, partial, query], drop_overlapping=guard)
    assert [d.id for d in sel.docs] == [d.id for d in docs] + ["partial"]
    assert sel.counts["dropped_overlapping"] == 2
    info = write_corpus(tmp_path / "out" / "kept", sel, {"name": "kept"}, guard)
    assert [(o["record"], o["collection"]) for o in info["overlap_check"]["dropped"]] == [("planted", "aero"),
                                                                                         ("query", "aero")]


def test_guard_fires_on_a_sentence_of_the_shared_adi_collection(tmp_path):
    from conftest import ADI
    if not (ADI / "corpus.jsonl").is_file():
        pytest.skip("the shared ADI collection is absent")
    guard = OverlapGuard.from_datasets(ADI.parent)
    row = json.loads((ADI / "corpus.jsonl").read_text().splitlines()[0])
    sentence = row["text"].split(" . ")[0] if len(row["text"].split(" . ")[0].split()) >= 8 else row["text"]
    doc = CorpusDoc("x", "Libraries", "An unrelated opening. " + sentence.upper() + " And an unrelated end.")
    found = guard.find(doc)
    assert found is not None and found.collection == "adi"
    assert guard.find(CorpusDoc("y", "Libraries", "An unrelated text about rivers and their long journey to sea.")) is None


def test_script_refuses_to_write_into_the_repository(capsys):
    main = runpy.run_path(str(ROOT / "scripts" / "build_corpus.py"))["main"]
    assert main(["--source", "wordnet", "--out", str(ROOT / "corpora")]) == 1
    assert "inside the repository" in capsys.readouterr().err
