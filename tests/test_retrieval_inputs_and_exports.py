"""retrieval/ on what a Pyserini / bm25s / BEIR user brings (passages
that lose text, deleted documents and '#' in doc ids in the Pyserini export, BOM-prefixed qrels
and run files, leg sets spelled with spaces in `alignir eval --run`, the "agree" fusion's chance
correction under an allowed_ids filter)."""
from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from conftest import share_model_cache, TINY_CORPUS, write_corpus, write_queries

pytestmark = pytest.mark.usefixtures("one_thread")

LONG = " ".join(f"Sentence number {i} talks about wind tunnels and heat." for i in range(30))


@pytest.fixture(scope="module")
def built(tmp_path_factory, tiny_model):
    """A BEIR folder over TINY_CORPUS (queries q0.., qrels) and an index of it whose model is a
    saved HF folder (so the CLI can reopen it)."""
    from alignir.retrieval.config import SparseConfig
    from alignir.retrieval.indexer import build_index

    root = tmp_path_factory.mktemp("retrieval")
    model = root / "tiny-hf"
    tiny_model.model.save_pretrained(model)
    tiny_model.tokenizer.save_pretrained(model)
    beir = root / "beir"
    (beir / "qrels").mkdir(parents=True)
    write_corpus(beir / "corpus.jsonl", TINY_CORPUS)
    write_queries(beir / "queries.jsonl", ["light plants", "stock market rates", "supersonic wind tunnel"])
    (beir / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq0\td0\t1\nq1\td1\t1\nq2\td2\t1\n")
    build_index(beir, root / "idx", model=str(model), sparse=SparseConfig.paper(doc_k=24, query_m=5),
                cache_dir=root / "cache", progress=False, device="cpu")
    return root


# ----------------------------------------------------------------------------- passages

def _spans(tok, text):
    return [(a, b) for a, b in tok(text, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
            if b > a]


@pytest.mark.parametrize("window, stride", [(40, 40), (40, 35), (32, 30), (120, 60), (25, 7)])
def test_sentence_aware_passages_cover_every_token(tiny_tokenizer, window, stride):
    """Cutting a passage back to a sentence end must not drop the text before the next
    passage's start (stride > 3/4 window, e.g. WINDOW:WINDOW without overlap, lost tokens)."""
    from alignir.retrieval.passages import split_passages

    spans = _spans(tiny_tokenizer, LONG)
    parts = split_passages(LONG, tiny_tokenizer, window, stride)
    covered = {i for p in parts for i, (a, b) in enumerate(spans) if p.start <= a and b <= p.end}
    assert covered == set(range(len(spans)))
    plain = split_passages(LONG, tiny_tokenizer, window, stride, sentence_aware=False)
    assert [p.start for p in parts] == [p.start for p in plain]
    for p, q in zip(parts, plain):
        assert p.text == LONG[p.start:p.end] and p.end <= q.end


# ----------------------------------------------------------------------------- Pyserini export

def test_pyserini_export_leaves_deleted_documents_out(built, tmp_path):
    """`alignir delete`: deleted documents "never come back from a search or an export"; the
    JsonVectorCollection used to hold them (empty vector, and their text with --corpus)."""
    import shutil

    from alignir.retrieval.export import export_documents
    from alignir.retrieval.indexer import delete_documents

    idx = tmp_path / "idx"
    shutil.copytree(built / "idx", idx)
    delete_documents(idx, ["d1", "d4"])
    contents = {f"d{i}": t for i, t in enumerate(TINY_CORPUS)}
    out = export_documents(idx, tmp_path / "ps", contents=contents)
    lines = [json.loads(line) for f in sorted((tmp_path / "ps").glob("docs-*.jsonl")) for line in open(f)]
    assert [r["id"] for r in lines] == ["d0", "d2", "d3", "d5"]
    assert all(r["vector"] for r in lines) and lines[1]["contents"] == TINY_CORPUS[2]
    assert out["docs"] == 4 and out["empty_docs"] == 0


def test_pyserini_query_export_holds_the_sparse_leg_query_vectors(built, tmp_path):
    """`alignir export pyserini-queries`: one line per query with the sparse leg's eq.16 vector
    (binary weights at scale 1: every aligned token of the query with weight 1), by term string."""
    from alignir.retrieval.export import export_queries
    from alignir.retrieval.runs import pyserini_terms
    from alignir.retrieval.searcher import Searcher

    queries = {"q0": "light plants", "q1": "stock market rates", "q2": "supersonic wind tunnel"}
    s = Searcher.open(built / "idx")  # the saved model folder the index records
    out = export_queries(s, queries, tmp_path / "q")
    lines = [json.loads(line) for line in open(tmp_path / "q" / "queries.jsonl", encoding="utf-8")]
    assert [r["contents"] for r in lines] == list(queries.values()) and out["scale"] == 1.0
    terms = pyserini_terms(s.sparsifier.term_map.term_strings)
    Q = s.encode(list(queries.values()), ["sparse"]).legs["sparse"].tocsr()
    for i, r in enumerate(lines):
        row = Q[i]
        assert r["vector"] == {terms[j]: 1 for j, w in zip(row.indices, row.data) if w > 0} and r["vector"]
    topics = (tmp_path / "q" / "topics.tsv").read_text(encoding="utf-8").splitlines()
    assert topics == [f"{q}\t{t}" for q, t in queries.items()]


def test_pyserini_passage_ids_survive_pyserini_maxp(tiny_model, tmp_path):
    """Pyserini's --max-passage keeps ``passage_id.split(delimiter)[0]`` as the doc id; a doc id
    holding the '#' delimiter ("page#intro" -> "page#intro#0") came back cut to "page"."""
    from alignir.retrieval.export import export_documents
    from alignir.retrieval.indexer import build_index

    ids = ["page#intro", "page#usage", "plain"]
    long = [" ".join(TINY_CORPUS[i:] + TINY_CORPUS[:i]) * 2 for i in range(len(ids))]
    with open(tmp_path / "corpus.jsonl", "w", encoding="utf-8") as f:
        for d, text in zip(ids, long):
            f.write(json.dumps({"_id": d, "title": "", "text": text}) + "\n")
    build_index(tmp_path / "corpus.jsonl", tmp_path / "idx", model="tiny", loaded=tiny_model,
                cache_dir=tmp_path / "cache", embedder_options={"max_length": 64}, progress=False,
                calibrate=False)
    out = export_documents(tmp_path / "idx", tmp_path / "ps")
    delimiter = out["passage_delimiter"]
    lines = [json.loads(line) for f in sorted((tmp_path / "ps").glob("docs-*.jsonl")) for line in open(f)]
    assert out["docs"] == 3 and out["passages"] == len(lines) > 3
    assert {r["id"].split(delimiter)[0] for r in lines} == set(ids)
    assert all(r["id"].count(delimiter) == 1 for r in lines)


# ----------------------------------------------------------------------------- BOM

def test_qrels_and_runs_with_a_bom_keep_their_first_id(tmp_path):
    """Files saved as "UTF-8 with BOM" (Notepad, Excel, PowerShell): corpus and queries readers
    drop the BOM; qrels without a header and TREC runs read the first id as '\\ufeffq1'."""
    from alignir.retrieval.beir import read_qrels
    from alignir.retrieval.runs import read_trec

    qrels = tmp_path / "test.tsv"
    qrels.write_bytes("q1\td1\t1\r\nq2\td2\t0\r\n".encode("utf-8-sig"))
    assert read_qrels(qrels) == {"q1": {"d1": 1}, "q2": {"d2": 0}}
    qrels.write_bytes("query-id\tcorpus-id\tscore\nq1\td1\t2\n".encode("utf-8-sig"))
    assert read_qrels(qrels) == {"q1": {"d1": 2}}
    run = tmp_path / "run.trec"
    run.write_bytes("q1 Q0 d1 1 2.5 tag\r\nq1 Q0 d2 2 1.5 tag\r\n".encode("utf-8-sig"))
    assert read_trec(run) == {"q1": {"d1": 2.5, "d2": 1.5}}


def test_load_beir_with_bom_qrels_keeps_every_query(built, tmp_path):
    import shutil
    import warnings

    from alignir.retrieval.beir import load_beir

    beir = tmp_path / "beir"
    shutil.copytree(built / "beir", beir)
    (beir / "qrels" / "test.tsv").write_bytes("q0\td0\t1\nq1\td1\t1\n".encode("utf-8-sig"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "judged queries are not in queries.jsonl"
        data = load_beir(beir)
    assert set(data.qrels) == set(data.queries) == {"q0", "q1"}


# ----------------------------------------------------------------------------- eval --run

def test_eval_modes_with_spaces_write_their_runs(built, tmp_path, monkeypatch):
    """`--mode "dense + bm25"` is accepted (parse_mode strips the parts) but its run tag
    'alignir-dense + bm25' held spaces: write_trec refused it after the whole evaluation."""
    from alignir.retrieval.cli import app
    from alignir.retrieval.commands.evaluate import _modes
    from alignir.retrieval.runs import read_trec

    assert _modes(" dense + bm25 , sparse") == ["dense+bm25", "sparse"]
    monkeypatch.setenv("ALIGNIR_CACHE", str(tmp_path / "cache"))
    share_model_cache(tmp_path / "cache")  # the run's converted models and ONNX exports
    run = tmp_path / "run.trec"
    r = CliRunner().invoke(app, ["eval", "--index", str(built / "idx"), "--dataset", str(built / "beir"),
                                 "--mode", "dense + bm25", "--run", str(run), "--top", "3", "--json"])
    assert r.exit_code == 0, r.output
    assert "dense+bm25" in json.loads(r.stdout)["metrics"]
    lines = run.read_text().splitlines()
    assert lines and all(line.split()[5] == "alignir-dense+bm25" for line in lines)
    assert set(read_trec(run)) == {"q0", "q1", "q2"}


# ----------------------------------------------------------------------------- agree + allowed_ids

def test_agree_corrects_for_chance_among_the_allowed_documents(built):
    """A filtered search draws its lists from the allowed documents: two legs returning exactly
    the allowed set agree fully (chance 1), so "agree" keeps the LLM leg's weight. The chance was
    computed from the whole collection, which silenced the sparse leg (BM25's order came back)."""
    from alignir.retrieval import fusion
    from alignir.retrieval.searcher import Searcher
    from alignir.retrieval.fusion_plan import LEG_SET_WEIGHTS

    s = Searcher.open(built / "idx", device="cpu")
    q = "light plants water market"
    allowed = [s.index.doc_ids[d] for d in s.leg_lists([q], ("bm25",), k=6)["bm25"][0]]
    assert len(allowed) >= 2
    lists = s.leg_lists([q], ("sparse", "bm25"), k=6, allowed_ids=allowed)
    assert set(lists["sparse"][0]) == set(lists["bm25"][0]) == {s.index.doc_ids.index(d) for d in allowed}
    w = LEG_SET_WEIGHTS["agree"][("sparse", "bm25")]
    want = fusion.zscore([lists["sparse"][0], lists["bm25"][0]], weights=[w["sparse"], w["bm25"]])
    for ids in (allowed, iter(allowed)):  # an iterator is read once
        hits = s.search(q, k=6, mode="sparse+bm25", fusion="agree", allowed_ids=ids)
        assert [h.doc_number for h in hits] == list(want)
        total = w["sparse"] + w["bm25"]
        assert [h.score for h in hits] == pytest.approx([v / total for v in want.values()])


def test_pyserini_export_with_a_corpus_lacking_ids_says_so(built, tmp_path, caplog):
    """``export pyserini --corpus``: a corpus without some indexed ids used to give them empty
    contents silently; one without any (the wrong corpus) is now an error."""
    from alignir.errors import InvalidInputError
    from alignir.retrieval.export import export_documents

    partial = {f"d{i}": t for i, t in enumerate(TINY_CORPUS) if i != 3}
    with caplog.at_level("WARNING"):
        out = export_documents(built / "idx", tmp_path / "ps", contents=partial)
    assert out["missing_contents"] == 1 and "'d3'" in caplog.text
    rows = {r["id"]: r for f in (tmp_path / "ps").glob("docs-*.jsonl") for r in map(json.loads, open(f))}
    assert rows["d3"]["contents"] == "" and rows["d2"]["contents"] == TINY_CORPUS[2]
    with pytest.raises(InvalidInputError, match="none of the index"):
        export_documents(built / "idx", tmp_path / "ps2", contents={"other": "text"})


def test_json_vector_collection_replaces_an_earlier_export_and_survives_an_interruption(tmp_path):
    """Shards of an earlier, larger export used to stay in the folder (Pyserini indexes every
    file there), and an interrupted export left a partial collection."""
    import scipy.sparse as sp

    from alignir.retrieval.runs import write_json_vector_collection

    out, terms = tmp_path / "ps", ["a", "b", "c"]
    m = sp.csr_matrix([[1.0, 0, 2.0]] * 5, dtype="float32")
    write_json_vector_collection(out, [f"d{i}" for i in range(5)], m, terms, shard_size=2)
    assert sorted(p.name for p in out.iterdir()) == ["docs-00000.jsonl", "docs-00001.jsonl", "docs-00002.jsonl"]
    before = {p.name: p.read_bytes() for p in out.iterdir()}

    class Breaks(list):
        def __getitem__(self, i):
            if i == 3:
                raise RuntimeError("interrupted")
            return super().__getitem__(i)

    with pytest.raises(RuntimeError):
        write_json_vector_collection(out, [f"e{i}" for i in range(5)], m, terms, contents=Breaks(["x"] * 5),
                                     shard_size=2)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert [p.name for p in tmp_path.iterdir()] == ["ps"]  # no partial folder left
    summary = write_json_vector_collection(out, ["f0", "f1"], m[:2], terms, shard_size=2)
    assert sorted(p.name for p in out.iterdir()) == ["docs-00000.jsonl"] == [p.split("/")[-1] for p in summary["files"]]
    assert [json.loads(x)["id"] for x in open(out / "docs-00000.jsonl")] == ["f0", "f1"]


@pytest.mark.parametrize("kw", [{"top": -1}, {"depth": -2}, {"top": 1.5}])
def test_fusion_refuses_a_negative_top_or_depth(kw):
    """``top=-1`` used to slice the last document off instead of being an error."""
    from alignir.errors import InvalidInputError
    from alignir.retrieval.fusion import rrf, zscore

    runs = [{"a": 3.0, "b": 2.0, "c": 1.0}, {"b": 1.0, "c": 0.5}]
    with pytest.raises(InvalidInputError, match="top / depth"):
        rrf(runs, **kw)
    if "top" in kw:
        with pytest.raises(InvalidInputError, match="top / depth"):
            zscore(runs, **kw)
    assert list(rrf(runs, top=2)) == ["b", "c"]  # b: 1/61 + 1/62, c: 1/62 + 1/63, a: 1/61
