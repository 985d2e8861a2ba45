"""Write a small index with alignir as of main 01bd0c7 (index format 1; run it with that checkout:
``python make_format1.py OUT``), and the search
results that code returns, for tests/test_store.py's back-compatibility test."""
import json
import sys
from pathlib import Path
import numpy as np
import scipy.sparse as sp
from alignir.index.dense import DenseIndex
from alignir.index.sparse import SparseIndex
from alignir.index.store import write_index, open_index
from alignir.retrieval.bm25 import lexical_leg

out = Path(sys.argv[1])
rng = np.random.default_rng(2026)
N, D, V = 24, 8, 40
ids = [f"d{i:02d}" for i in range(N)]
vecs = rng.standard_normal((N, D)).astype(np.float32)
csr = sp.random(N, V, density=0.15, format="csr", dtype=np.float32, random_state=5)
words = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "theta", "kappa"]
texts = [" ".join(rng.choice(words, size=6)) for _ in range(N)]
manifest = {"encoder": {"model": "v1-fixture", "d": D}, "params": {"sparse": {"doc_k": 6}}}
write_index(out / "index", manifest, ids, vecs, sparse_index=SparseIndex.from_csr(csr, quantize="uint16"),
            dense_index=DenseIndex.build(vecs, center=True), pc1=np.ones(D, np.float32),
            extra_arrays={"term_strings": np.array([f"t{i}" for i in range(V)])},
            lexical=lexical_leg(texts), fsync=False)
st = open_index(out / "index")
q_dense = rng.standard_normal((3, D)).astype(np.float32)
q_sparse = sp.random(3, V, density=0.3, format="csr", dtype=np.float32, random_state=8)
q_lex = sp.csr_matrix(np.eye(3, st.lexical.n_terms, dtype=np.float32))
res = {"q_dense": q_dense.tolist(), "q_sparse": q_sparse.toarray().tolist(), "q_lexical": q_lex.toarray().tolist()}
for name, part, q in (("sparse", st.sparse, q_sparse), ("dense", st.dense, q_dense), ("lexical", st.lexical.index, q_lex)):
    d, s = part.search(q, 5)
    res[name] = {"docs": d.tolist(), "scores": s.tolist()}
(out / "expected.json").write_text(json.dumps(res))
