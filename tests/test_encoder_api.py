"""alignir.Encoder: one call gives a text's dense vector and its aligned-token CSR row, the
very rows an index stores and the vectors its searches use."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import alignir
from alignir.encoders.embedders import get_embedder
from alignir.encoders.onnx_runtime import apply_runtime
from alignir.errors import InvalidInputError
from alignir.index.store import open_index
from alignir.retrieval.config import SparseConfig
from alignir.retrieval.encoder import Encoded, Encoder
from alignir.retrieval.indexer import build_index
from alignir.retrieval.searcher import Searcher
from alignir.retrieval.sparsify import Sparsifier, fit_corpus_pc1, resolve_lambda

from conftest import TINY_CORPUS, write_corpus

QUERIES = ["light plants", "stock market rates", "supersonic wind tunnel"]
SPARSE = SparseConfig(doc_k=24, query_m=5)  # λ from pc1_remove: fitted on the corpus


@pytest.fixture(scope="module")
def built(tmp_path_factory, tiny_model):
    root = tmp_path_factory.mktemp("encoder-api")
    corpus = write_corpus(root / "corpus.jsonl", TINY_CORPUS)
    build_index(corpus, root / "idx", model="tiny", sparse=SPARSE, loaded=tiny_model, use_cache=False,
                progress=False, calibrate=False)
    return root / "idx"


def test_exported_from_the_package():
    assert alignir.Encoder is Encoder and "Encoder" in dir(alignir)


def test_from_pretrained_folder_gives_the_embedder_vectors_and_their_projection(tiny_folder):
    enc = Encoder.from_pretrained(tiny_folder, device="cpu", sparse=SPARSE)
    out = enc.encode_documents(TINY_CORPUS)
    assert isinstance(out, Encoded) and len(out) == len(TINY_CORPUS) and out.role == "document"
    # the same embedder on the same runtime (auto: ONNX Runtime, same vectors within float rounding)
    ref = apply_runtime(get_embedder("prompteol", enc.loaded, progress=False), enc.runtime).encode_documents(TINY_CORPUS)
    np.testing.assert_array_equal(out.dense, ref)
    want = Sparsifier.for_model(enc.loaded, SPARSE).documents(ref)
    assert sp.isspmatrix_csr(out.sparse) and out.sparse.dtype == np.float32
    assert (out.sparse != want).nnz == 0 and out.sparse.shape == (len(TINY_CORPUS), enc.loaded.vocab_size)
    assert np.all(np.diff(out.sparse.indptr) <= SPARSE.doc_k)  # top-K terms per document (eq.15)


def test_decode_names_each_weight_heaviest_first(tiny_model):
    enc = Encoder.from_pretrained("tiny", loaded=tiny_model, sparse=SPARSE)
    out = enc.encode_queries(QUERIES)
    for i in range(len(QUERIES)):
        row = out.sparse.getrow(i)
        terms = out.decode(i)
        assert len(terms) == row.nnz
        assert sorted(terms.values(), reverse=True) == list(terms.values())
        assert {enc.terms[j]: float(w) for j, w in zip(row.indices, row.data)} == terms
    assert list(out.decode(0, top=2)) == list(out.decode(0))[:2]
    with pytest.raises(InvalidInputError):
        out.decode(len(QUERIES))


def test_from_index_reproduces_the_stored_rows_and_the_search_vectors(built, tiny_model):
    stored = open_index(built)
    enc = Encoder.from_index(built, loaded=tiny_model)
    assert enc.config == SparseConfig.from_dict(stored.params["sparse"]) and enc.config.pc1_lambda != 0.0
    docs = enc.encode_documents(TINY_CORPUS)  # one batch, as the build encoded them
    np.testing.assert_array_equal(docs.dense, np.asarray(stored.dense_vectors))
    for n in range(len(TINY_CORPUS)):
        terms, weights = stored.sparse.doc_vector(n)
        row = docs.sparse.getrow(n)
        np.testing.assert_array_equal(row.indices, terms)
        np.testing.assert_array_equal(row.data, weights)
    batch = Searcher.open(built, loaded=tiny_model).encode(QUERIES, legs=["dense", "sparse"])
    queries = enc.encode_queries(QUERIES)
    np.testing.assert_array_equal(queries.dense, batch.legs["dense"])
    assert (queries.sparse != batch.legs["sparse"]).nnz == 0


def test_fit_resolves_lambda_as_a_build_does(tiny_model):
    enc = Encoder.from_pretrained("tiny", loaded=tiny_model, sparse=SPARSE)
    assert enc.sparsifier.pc1 is None and enc.config.pc1_lambda == 0.0
    H = enc.encode_documents(TINY_CORPUS).dense
    enc.fit(TINY_CORPUS)
    pc1 = fit_corpus_pc1(H)
    np.testing.assert_array_equal(enc.sparsifier.pc1, pc1)
    assert enc.config == resolve_lambda(SPARSE, H, pc1)
    assert (enc.encode_documents(TINY_CORPUS).sparse != Sparsifier.for_model(
        tiny_model, enc.config, pc1=pc1).documents(H)).nnz == 0


def test_batches_and_cache_give_the_same_vectors(tiny_model, tmp_path):
    enc = Encoder.from_pretrained("tiny", loaded=tiny_model, sparse=SPARSE)
    whole = enc.encode_documents(TINY_CORPUS)
    cached = Encoder.from_pretrained("tiny", loaded=tiny_model, sparse=SPARSE, cache_dir=tmp_path / "cache")
    assert cached.use_cache
    first = cached.encode_documents(TINY_CORPUS, batch_size=2, show_progress_bar=True)
    again = cached.encode_documents(TINY_CORPUS, batch_size=2)  # read back from the cache
    np.testing.assert_array_equal(first.dense, again.dense)
    np.testing.assert_allclose(first.dense, whole.dense, rtol=1e-5, atol=1e-5)
    assert len(list((tmp_path / "cache").rglob("document/*.npz"))) == 3  # one part per batch
    empty = enc.encode_queries([])
    assert empty.dense.shape == (0, enc.dim) and empty.sparse.shape[0] == 0


def test_bad_input_is_one_clear_error(tiny_model):
    enc = Encoder.from_pretrained("tiny", loaded=tiny_model)
    with pytest.raises(InvalidInputError, match="single string"):
        enc.encode_queries("a query")
    with pytest.raises(InvalidInputError, match="batch_size"):
        enc.encode_documents(["x"], batch_size=0)
    with pytest.raises(InvalidInputError, match="texts\\[1\\]"):
        enc.encode_documents(["x", 3])
    with pytest.raises(InvalidInputError, match="brings its own adapter"):
        Encoder.from_pretrained("smollm2-135m-alignir-v3", adapter="/some/adapter", loaded=tiny_model)
    with pytest.raises(InvalidInputError, match="trained 'infonce' embedder"):
        Encoder.from_pretrained("smollm2-135m-alignir-v3", family="mean", loaded=tiny_model)
    with pytest.raises(InvalidInputError, match="two models given"):
        Encoder.from_pretrained("tiny", model="smollm2-135m", loaded=tiny_model)


def test_model_is_taken_as_the_name_as_build_index_takes_it(tiny_model):
    by_keyword = Encoder.from_pretrained(model="tiny", loaded=tiny_model, sparse=SPARSE)
    positional = Encoder.from_pretrained("tiny", loaded=tiny_model, sparse=SPARSE)
    assert by_keyword.model == positional.model == "tiny"
    np.testing.assert_array_equal(by_keyword.encode_documents(TINY_CORPUS).dense,
                                  positional.encode_documents(TINY_CORPUS).dense)


@pytest.mark.model
def test_a_shipped_name_reads_through_its_adapter(smollm2):
    enc = Encoder.from_pretrained("smollm2-135m-alignir-v3", loaded=smollm2)
    assert enc.family == "infonce" and enc.options["adapter"] == "builtin:smollm2-135m-alignir-v3"
    out = enc.encode_documents(["Photosynthesis in plants."])
    assert out.dense.shape == (1, smollm2.hidden_size) and 0 < out.sparse.nnz <= enc.config.doc_k


def test_the_csr_scored_outside_alignir_is_the_sparse_leg(built, tiny_model):
    """docs/python.md: queries.sparse @ documents.sparse.T gives the sparse leg's scores."""
    enc = Encoder.from_index(built, loaded=tiny_model)
    docs, queries = enc.encode_documents(TINY_CORPUS), enc.encode_queries(QUERIES)
    scores = (queries.sparse @ docs.sparse.T).toarray()
    s = Searcher.open(built, loaded=tiny_model)
    for i, q in enumerate(QUERIES):
        hits = s.search(q, k=len(TINY_CORPUS), mode="sparse")
        assert hits
        for h in hits:
            assert h.score == pytest.approx(scores[i, h.doc_number], rel=1e-5, abs=1e-6)
    shared = ((queries.sparse != 0).astype(np.int32) @ (docs.sparse != 0).astype(np.int32).T).toarray() > 0
    for i, q in enumerate(QUERIES):  # a document sharing a term with the query is a hit
        assert {h.doc_number for h in s.search(q, k=len(TINY_CORPUS), mode="sparse")} == set(
            np.flatnonzero(shared[i]).tolist())


def test_compile_is_a_run_option_the_index_does_not_record(tiny_folder):
    """``compile=True`` reaches the embedder but not the recorded options: an index built with
    it opens and searches without compiling, and its fingerprint is the eager one's."""
    enc = Encoder.from_pretrained(tiny_folder, device="cpu", sparse=SPARSE, compile=True, runtime="torch")
    plain = Encoder.from_pretrained(tiny_folder, device="cpu", sparse=SPARSE, runtime="torch")
    assert enc.embedder.compile is True and plain.embedder.compile is False
    assert "compile" not in enc.options
    assert enc.options == plain.options
    assert enc.embedder.fingerprint() == plain.embedder.fingerprint()
