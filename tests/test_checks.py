"""alignir.checks: the input checks shared by index/, encoders/ and retrieval/."""
import subprocess
import sys

import numpy as np
import pytest

from alignir.checks import check_texts, doc_numbers_for_add, int_ids
from alignir.errors import InvalidInputError


def test_int_ids_flattens_to_int64_and_keeps_order():
    out = int_ids(np.array([[3, 0], [2, 1]], dtype=np.int32), 4, "ids")
    assert out.dtype == np.int64 and out.tolist() == [3, 0, 2, 1]
    assert int_ids([], 4, "ids").shape == (0,)


def test_int_ids_names_the_offending_values_and_the_unit():
    with pytest.raises(InvalidInputError, match=r"doc_numbers has doc numbers outside \[0, 3\): \[3, -1\]"):
        int_ids([0, 3, -1], 3, "doc_numbers", "doc numbers")
    with pytest.raises(InvalidInputError, match="must be integer token ids, got dtype float64"):
        int_ids([0.0, 1.0], 3, "ids", "token ids")


def test_token_mask_uses_the_same_check():
    from alignir.encoders.aligned import token_mask

    assert token_mask(None, 4) is None and token_mask([], 4) is None
    assert token_mask({3, 1}, 4).tolist() == [False, True, False, True]
    with pytest.raises(InvalidInputError, match=r"mask_ids has token ids outside \[0, 4\): \[4\]"):
        token_mask(np.array([0, 4]), 4)


def test_doc_numbers_for_add_numbers_new_rows_or_checks_given_ones():
    assert doc_numbers_for_add(None, 3, 5).tolist() == [5, 6, 7]
    assert doc_numbers_for_add((4, 1), 2, 0).dtype == np.int64
    for bad, msg in [([1.5, 2.0], "must be integers"), ([1], "got 1 doc_numbers for 2 rows"),
                     ([0, -2], "doc number -2 is negative"),
                     ([3, 3], r"duplicate doc numbers in add: \[3\]")]:
        with pytest.raises(InvalidInputError, match=msg):
            doc_numbers_for_add(bad, 2, 0)


@pytest.mark.parametrize("kind", ["dense", "sparse"])
def test_both_indexes_reject_duplicate_doc_numbers_with_one_message(kind):
    import scipy.sparse as sp

    if kind == "dense":
        from alignir.index.dense import DenseIndex

        index = DenseIndex.build(np.ones((1, 4), np.float32))
        rows = np.eye(2, 4, dtype=np.float32)
    else:
        from alignir.index.sparse import SparseIndex

        index = SparseIndex.from_csr(sp.csr_matrix(np.ones((1, 4), np.float32)))
        rows = sp.csr_matrix(np.eye(2, 4, dtype=np.float32))
    with pytest.raises(InvalidInputError, match=r"duplicate doc numbers in add: \[7\]"):
        index.add(rows, doc_numbers=[7, 7])
    assert index.add(rows, doc_numbers=[7, 2]).tolist() == [7, 2]


def test_term_map_keeps_the_shape_and_uses_the_same_check():
    from alignir.encoders.aligned import TermMap

    tm = TermMap.identity(5)
    assert tm.map_ids(np.array([[4, 0], [1, 2]])).tolist() == [[4, 0], [1, 2]]
    assert tm.map_ids(np.zeros((0, 3), np.int64)).shape == (0, 3)
    with pytest.raises(InvalidInputError, match=r"ids has token ids outside \[0, 5\): \[5\]"):
        tm.map_ids(np.array([[1], [5]]))


def test_check_texts_returns_a_new_list_of_the_texts():
    given = ("a", "", "b c")
    assert check_texts(given) == ["a", "", "b c"]
    assert check_texts(t for t in ["x"]) == ["x"] and check_texts([]) == []
    mine = ["a"]
    assert check_texts(mine) is not mine


@pytest.mark.parametrize("texts, msg", [
    ("one text", r"^texts must be a sequence of strings, not a single string$"),
    (b"bytes", "not a single string"),
    (42, r"^texts must be a sequence of strings, got int$"),
    (["ok", None], r"^texts\[1\] is NoneType, expected str$"),
    (["ok", b"\xff"], r"^texts\[1\] is bytes, expected str \(decode bytes to str first\)$"),
])
def test_check_texts_refuses_what_is_not_a_list_of_strings(texts, msg):
    with pytest.raises(InvalidInputError, match=msg):
        check_texts(texts)
    with pytest.raises(InvalidInputError, match=msg.replace("texts", "queries", 1)):
        check_texts(texts, "queries")


def test_the_embedding_cache_checks_texts_with_it(tmp_path):
    from alignir.encoders.cache import EmbeddingCache

    cache = EmbeddingCache(tmp_path)
    with pytest.raises(InvalidInputError, match="^texts must be a sequence of strings, not a single string$"):
        cache.lookup(None, "one text", "document")  # refused before the embedder is asked anything
    with pytest.raises(InvalidInputError, match=r"^texts\[0\] is int, expected str$"):
        cache.lookup(None, [3], "query")


@pytest.mark.e2e  # a child Python process
def test_checks_import_neither_torch_nor_numba():
    code = ("import sys, alignir.checks\n"
            "print(','.join(m for m in ('torch', 'numba') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    assert out.stdout.strip() == ""
