"""alignir.checks: the id check shared by index/ and encoders/."""
import numpy as np
import pytest

from alignir.checks import int_ids
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
