"""alignir: sparse/dense hybrid retrieval from LLM embeddings by aligned-token decoding.

The public surface, imported lazily so that ``import alignir`` stays light (no torch, no numba)::

    import alignir
    enc = alignir.Encoder.from_pretrained("smollm2-135m-alignir-v4")
    vectors = enc.encode_documents(["a text"])   # .dense [n, d], .sparse CSR, .decode(i)
    alignir.build_index("datasets/adi", "indexes/adi", model="smollm2-135m")
    searcher = alignir.Searcher.open("indexes/adi")
    hits = searcher.search("information retrieval systems", k=10, mode="hybrid")

The layers: this core package (``errors``, ``checks``, ``io``, ``qrels``; imports no other
alignir package), then ``alignir.encoders`` (text -> dense h -> aligned tokens) and
``alignir.index`` (storage and scoring), which never import each other, then
``alignir.retrieval`` (what a user calls: searcher, fusion, runs, metrics, the ``alignir``
command line). docs/interfaces.md states the rules; tests/test_packaging.py checks them.
"""
from __future__ import annotations

import importlib
import os
from importlib.metadata import PackageNotFoundError, version
from typing import Any

# torch's CPU kernels run on OpenMP threads, and a thread waiting for the next parallel region
# spins (libgomp: 300,000 turns) before it sleeps. On a machine busier than its cores the spinning
# threads take the cores the working ones need: with three other torch processes on 2 cores a query
# took 1.69 s p50 and 20.6 s p99 instead of 0.07 s. A 10,000-turn spin gives 0.43 / 2.06 s there and
# keeps the quiet machine's speed (0.074 s), where sleeping at once (OMP_WAIT_POLICY=PASSIVE) costs
# every query 1.8x (benchmarks/archive/omp_wait_policy.py). libgomp reads it when torch loads it: this applies when alignir
# is imported before torch, and a user's own OMP_WAIT_POLICY or GOMP_SPINCOUNT wins.
if "OMP_WAIT_POLICY" not in os.environ:
    os.environ.setdefault("GOMP_SPINCOUNT", "10000")

try:
    __version__ = version("alignir")
except PackageNotFoundError:  # a source tree that is not installed
    __version__ = "0+unknown"

#: public name -> module that defines it
_EXPORTS: dict[str, str] = {
    "Encoder": "alignir.retrieval.encoder",
    "Encoded": "alignir.retrieval.encoder",
    "build_index": "alignir.retrieval.indexer",
    "resparsify": "alignir.retrieval.indexer",
    "add_lexical": "alignir.retrieval.indexer",
    "delete_documents": "alignir.retrieval.indexer",
    "add_documents": "alignir.retrieval.indexer",
    "Searcher": "alignir.retrieval.searcher",
    "Hit": "alignir.retrieval.searcher",
    "IndexConfig": "alignir.retrieval.config",
    "SparseConfig": "alignir.retrieval.config",
    "DenseConfig": "alignir.retrieval.config",
    "LexicalConfig": "alignir.retrieval.config",
    "FusionConfig": "alignir.retrieval.config",
    "PassageConfig": "alignir.retrieval.config",
    "UNSET": "alignir.retrieval.config",
    "load_beir": "alignir.retrieval.beir",
    "AlignirError": "alignir.errors",
    "InvalidInputError": "alignir.errors",
    "BeirFormatError": "alignir.errors",
    "CorpusError": "alignir.errors",
    "QueriesError": "alignir.errors",
    "QrelsError": "alignir.errors",
    "DownloadError": "alignir.errors",
    "ModelNotFoundError": "alignir.errors",
    "CorpusOverlapError": "alignir.errors",
    "IndexStoreError": "alignir.errors",
    "NotAnIndexError": "alignir.errors",
    "CorruptIndexError": "alignir.errors",
    "UnsupportedFormatError": "alignir.errors",
    "FingerprintMismatch": "alignir.errors",
    "PrecisionMismatch": "alignir.errors",
    "IndexWriteError": "alignir.errors",
    "IndexReadError": "alignir.errors",
    "IndexChangedError": "alignir.errors",
    "IndexBusyError": "alignir.errors",
    "MilvusError": "alignir.errors",
    "CollectionMismatch": "alignir.errors",
    "IncompleteCollection": "alignir.errors",
    "LegNotServedError": "alignir.errors",
    "RayEncodeError": "alignir.errors",
    "DocumentNotFoundError": "alignir.errors",
    "UnauthorizedError": "alignir.errors",
    "BodyTooLargeError": "alignir.errors",
    "NotReadyError": "alignir.errors",
}

__all__ = ["__version__", *_EXPORTS]


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'alignir' has no attribute {name!r}")
    value = getattr(importlib.import_module(_EXPORTS[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
