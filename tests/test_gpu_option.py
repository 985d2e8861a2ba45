"""The dense leg's GPU switch (the ``[gpu]`` extra, faiss-gpu): "cuda" asks for the GPU, "cpu"
keeps FAISS on the CPU, "auto" follows what faiss sees. On these CPU-only machines the GPU is
never really used, and searches are unchanged by the switch."""
from __future__ import annotations

import faiss
import numpy as np
import pytest

from alignir.index.dense import DenseIndex
from alignir.retrieval.searcher import dense_on_gpu


def test_device_option_to_gpu_flag():
    assert dense_on_gpu("cuda") and dense_on_gpu("cuda:1")
    assert not dense_on_gpu("cpu")
    assert dense_on_gpu("auto") == (faiss.get_num_gpus() > 0)


@pytest.mark.parametrize("kind", ["flat", "hnsw"])
def test_use_gpu_reports_where_searches_run_and_keeps_results(kind):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(200, 16)).astype(np.float32)
    idx = DenseIndex.build(x, kind=kind, normalize=True)
    before = idx.search(x[:5], 7)
    on_gpu = idx.use_gpu(True)
    assert on_gpu == (kind != "hnsw" and faiss.get_num_gpus() > 0)
    after = idx.search(x[:5], 7)
    assert idx.use_gpu(False) is False
    np.testing.assert_array_equal(before[0], after[0])
    np.testing.assert_allclose(before[1], after[1], rtol=1e-5)
    np.testing.assert_allclose(idx.reconstruct([3, 0]), idx.transform_queries(x[[3, 0]]), rtol=1e-6)
