"""BEIR loading: every bad-input case reported with line numbers, and real ADI loading."""
from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest

from alignir.errors import CorpusError, QrelsError, QueriesError
from alignir.retrieval.beir import (
    BeirConsistencyWarning,
    Document,
    load_beir,
    read_corpus_jsonl,
    read_qrels,
    read_queries,
    resolve_dataset,
)
from conftest import ADI

needs_adi = pytest.mark.skipif(not ADI.is_dir(), reason="shared ADI collection not present")


def _write(path: Path, lines: list[str | bytes]) -> Path:
    data = b"".join((ln if isinstance(ln, bytes) else ln.encode("utf-8")) + b"\n" for ln in lines)
    path.write_bytes(data)
    return path


def _doc(i, title="t", text="x"):
    return json.dumps({"_id": i, "title": title, "text": text})


def _make_beir(root: Path, docs, queries, qrels, split="test") -> Path:
    root.mkdir(parents=True, exist_ok=True)
    _write(root / "corpus.jsonl", [_doc(i, t, x) for i, t, x in docs])
    _write(root / "queries.jsonl", [json.dumps({"_id": q, "text": t}) for q, t in queries])
    (root / "qrels").mkdir(exist_ok=True)
    _write(root / "qrels" / f"{split}.tsv", ["query-id\tcorpus-id\tscore"] + [f"{q}\t{d}\t{r}" for q, d, r in qrels])
    return root


def test_corpus_good_file_title_plus_text(tmp_path):
    p = _write(tmp_path / "c.jsonl", [_doc("d1", "Title", "body"), "", _doc("d2", "", "only text"), _doc(3, "T", "")])
    c = read_corpus_jsonl(p)
    assert list(c) == ["d1", "d2", "3"]
    assert c["d1"] == Document("Title", "body")
    assert c.texts() == ["Title body", "only text", "T"]
    assert c.skipped == []


@pytest.mark.parametrize(
    "bad, expect",
    [
        (b'{"_id": "b", "text": "unterminated', "malformed JSON (Invalid control character at, column 35)"),
        (b'{"_id": "b", "text": "caf\xe9"}', "invalid UTF-8 byte 0xe9"),
        (b'["_id", "b"]', "expected a JSON object"),
        (b'{"title": "t", "text": "x"}', 'missing "_id"'),
        (b'{"_id": "b c", "text": "x"}', "contains whitespace"),
        (b'{"_id": "b", "title": "t"}', 'missing "text"'),
        (b'{"_id": "b", "title": "", "text": "  "}', "empty title and text"),
        (b'{"_id": "b", "text": 5}', '"text" must be a string'),
        (b'{"_id": "a", "text": "again"}', "duplicate _id 'a' (first seen on line 1)"),
    ],
)
def test_corpus_each_bad_line_reported_with_line_number(tmp_path, bad, expect):
    p = _write(tmp_path / "c.jsonl", [_doc("a"), bad, _doc("z")])
    with pytest.raises(CorpusError) as ei:
        read_corpus_jsonl(p)
    assert ei.value.problems == [(2, ei.value.problems[0][1])]
    assert expect in ei.value.problems[0][1]
    assert "line 2:" in str(ei.value)
    # skip_bad keeps the good lines and records the bad one
    c = read_corpus_jsonl(p, skip_bad=True)
    assert list(c) == ["a", "z"]
    assert [s.line for s in c.skipped] == [2] and expect in c.skipped[0].reason


def test_corpus_all_problems_listed_at_once(tmp_path):
    p = _write(tmp_path / "c.jsonl", [b"{bad", _doc("a"), b"\xff\xfe", _doc("a"), _doc("b")])
    with pytest.raises(CorpusError) as ei:
        read_corpus_jsonl(p)
    assert [ln for ln, _ in ei.value.problems] == [1, 3, 4]
    assert isinstance(ei.value, ValueError)


def test_corpus_empty_and_all_bad_and_missing(tmp_path):
    with pytest.raises(CorpusError, match="corpus is empty"):
        read_corpus_jsonl(_write(tmp_path / "e.jsonl", ["", "  "]))
    with pytest.raises(CorpusError, match="corpus is empty"):
        read_corpus_jsonl(_write(tmp_path / "b.jsonl", [b"{x"]), skip_bad=True)
    with pytest.raises(FileNotFoundError, match="corpus file not found"):
        read_corpus_jsonl(tmp_path / "nope.jsonl")


def test_corpus_empty_document_policy(tmp_path):
    p = _write(tmp_path / "c.jsonl", [_doc("a"), _doc("e", "", ""), _doc("b")])
    with pytest.raises(CorpusError, match="empty title and text"):
        read_corpus_jsonl(p)
    skipped = read_corpus_jsonl(p, empty="skip")
    assert list(skipped) == ["a", "b"] and [s.line for s in skipped.skipped] == [2]
    assert list(read_corpus_jsonl(p, empty="keep")) == ["a", "e", "b"]
    with pytest.raises(ValueError, match="empty must be"):
        read_corpus_jsonl(p, empty="drop")


def test_queries_validation(tmp_path):
    good = json.dumps({"_id": "q1", "text": "hello"})
    p = _write(tmp_path / "q.jsonl", [good, json.dumps({"_id": "q2", "text": ""}), good, b"\x80"])
    with pytest.raises(QueriesError) as ei:
        read_queries(p)
    assert [ln for ln, _ in ei.value.problems] == [2, 3, 4]
    with pytest.warns(UserWarning, match="skipped"):
        assert read_queries(p, skip_bad=True) == {"q1": "hello"}


def test_qrels_formats_and_errors(tmp_path):
    p = _write(tmp_path / "a.tsv", ["query-id\tcorpus-id\tscore", "1\td1\t2", "1\td2\t0", "2\td1\t1.0"])
    assert read_qrels(p) == {"1": {"d1": 2, "d2": 0}, "2": {"d1": 1}}
    trec = _write(tmp_path / "b.txt", ["1 0 d1 1", "3 0 d9 2"])
    assert read_qrels(trec) == {"1": {"d1": 1}, "3": {"d9": 2}}
    bad = _write(tmp_path / "c.tsv", ["q\td\tscore", "1\td1", "1\td1\tx", "1\td2\t1", "1\td2\t2"])
    with pytest.raises(QrelsError) as ei:
        read_qrels(bad)
    assert [ln for ln, _ in ei.value.problems] == [2, 3, 5]
    with pytest.raises(QrelsError, match="no judgements"):
        read_qrels(_write(tmp_path / "d.tsv", ["query-id\tcorpus-id\tscore"]))


def test_qrels_missing_split_lists_available(tmp_path):
    root = _make_beir(tmp_path / "ds", [("d1", "t", "x")], [("q1", "a")], [("q1", "d1", 1)], split="dev")
    with pytest.raises(FileNotFoundError, match=r"available splits: dev"):
        read_qrels(root, "test")


def test_load_beir_consistency(tmp_path):
    root = _make_beir(
        tmp_path / "toy",
        docs=[("d1", "A", "x"), ("d2", "", "y"), ("d3", "C", "z")],
        queries=[("q1", "first"), ("q2", "second"), ("q3", "unjudged")],
        qrels=[("q1", "d1", 1), ("q2", "d9", 1), ("q2", "d2", 1), ("q7", "d1", 1)],
    )
    with pytest.warns(BeirConsistencyWarning) as rec:
        ds = load_beir(root)
    msgs = " | ".join(str(w.message) for w in rec)
    assert "1 of 3 judged queries are not in queries.jsonl" in msgs
    assert "1 judgements name 1 documents not in corpus.jsonl" in msgs
    assert ds.queries == {"q1": "first", "q2": "second"}  # restricted to judged ones
    assert ds.qrels == {"q1": {"d1": 1}, "q2": {"d9": 1, "d2": 1}}  # unknown query dropped
    assert len(ds.corpus) == 3 and ds.name == "toy" and len(ds.issues) == 2
    with pytest.raises(ValueError, match="inconsistent BEIR folder"):
        load_beir(root, strict=True)


def test_load_beir_no_judged_query_present(tmp_path):
    root = _make_beir(tmp_path / "t", [("d1", "t", "x")], [("q1", "a")], [("q9", "d1", 1)])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", BeirConsistencyWarning)
        with pytest.raises(ValueError, match="none of the judged queries"):
            load_beir(root)


def test_resolve_dataset_by_name_via_env(tmp_path, monkeypatch):
    root = _make_beir(tmp_path / "data" / "toy", [("d1", "t", "x")], [("q1", "a")], [("q1", "d1", 1)])
    monkeypatch.setenv("ALIGNIR_DATA", str(tmp_path / "elsewhere") + ":" + str(tmp_path / "data"))
    assert resolve_dataset("toy") == root
    assert load_beir("toy").queries == {"q1": "a"}
    with pytest.raises(FileNotFoundError, match="not found"):
        resolve_dataset("nonexistent-set")
    (tmp_path / "notbeir").mkdir()
    with pytest.raises(FileNotFoundError, match="not a BEIR folder"):
        resolve_dataset(tmp_path / "notbeir")


@needs_adi
def test_load_real_adi():
    with warnings.catch_warnings():
        warnings.simplefilter("error", BeirConsistencyWarning)
        ds = load_beir(ADI)
    assert (len(ds.corpus), len(ds.queries)) == (82, 35)
    assert sum(len(j) for j in ds.qrels.values()) == 170
    assert set(ds.queries) == set(ds.qrels)
    assert all(d in ds.corpus for j in ds.qrels.values() for d in j)
    first = json.loads((ADI / "corpus.jsonl").read_text().splitlines()[0])
    assert ds.corpus[first["_id"]].contents == f"{first['title']} {first['text']}".strip()


def test_download_beir_from_a_local_zip_url(tmp_path):
    """The download path (fetch, unzip, atomic rename) over a file:// URL: no network needed."""
    import zipfile

    from alignir.retrieval.beir import download_beir

    src = _make_beir(tmp_path / "src" / "toy", [("d1", "t", "x")], [("q1", "a")], [("q1", "d1", 1)])
    zpath = tmp_path / "toy.zip"
    with zipfile.ZipFile(zpath, "w") as zf:
        for f in src.rglob("*"):
            if f.is_file():
                zf.write(f, f"toy/{f.relative_to(src)}")
    dest = download_beir("toy", tmp_path / "cache", url=zpath.as_uri())
    assert dest == tmp_path / "cache" / "toy"
    assert load_beir(dest).qrels == {"q1": {"d1": 1}}
    assert [p.name for p in (tmp_path / "cache").iterdir()] == ["toy"]  # no temp folder left
    evil = tmp_path / "evil.zip"
    with zipfile.ZipFile(evil, "w") as zf:
        zf.writestr("../outside.txt", "x")
    with pytest.raises(ValueError, match="escapes the target"):
        download_beir("evil", tmp_path / "cache", url=evil.as_uri())
    assert not (tmp_path / "outside.txt").exists()
    assert sorted(p.name for p in (tmp_path / "cache").iterdir()) == ["toy"]
