"""How widely a collection's documents share their aligned tokens, per trained adapter.

A document's sparse vector is its top-K aligned tokens (“A Text is Worth Several Tokens” eq.15,
the index's own Sparsifier through ``alignir.Encoder``, u1 of eq.14 fitted on the collection).
The sparse leg has no inverse document frequency: a token every document carries adds about the
same to every candidate and only blurs the ranking. For each adapter this reports

- ``weighted_df``: the mean over documents of Σ_t share_t · df_t, the share of the document's
  weight on token t times the fraction of documents that carry t;
- ``weight_on_common``: the mean share of a document's weight on tokens carried by more than half
  of the documents;
- ``postings_per_doc``: selected tokens with a positive weight (at most K);
- ``most_shared``: the tokens carried by the most documents, with that fraction.

    python -m benchmarks.archive.aligned_token_spread ../shared/datasets/adi \\
        --adapter v3=builtin:smollm2-135m-alignir-v3 --adapter run=benchmarks/results/adapters/RUN

Rows replace those of the same (dataset, adapter) in benchmarks/results/aligned_token_spread.json.
"""
from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from benchmarks.common import adapter_encoders
from benchmarks.common import replace_rows

RESULTS = Path(__file__).resolve().parents[1] / "results" / "aligned_token_spread.json"


def spread(S: sp.csr_matrix, terms: tuple[str, ...], top: int = 15) -> dict:
    """The statistics above for the documents' sparse vectors ``S`` [n, n_terms] (weights ≥ 0)."""
    S = sp.csr_matrix(S, dtype=np.float64)
    n = S.shape[0]
    df = np.asarray((S > 0).sum(0)).ravel() / n
    totals = np.asarray(S.sum(1)).ravel()
    shares = sp.diags(1.0 / np.where(totals > 0, totals, 1.0)) @ S
    common = (df > 0.5).astype(np.float64)
    order = np.argsort(-df, kind="stable")[:top]
    return {"documents": n,
            "weighted_df": float((shares @ df).mean()),
            "weight_on_common": float((shares @ common).mean()),
            "postings_per_doc": float(S.nnz / n),
            "most_shared": [[terms[j], round(float(df[j]), 3)] for j in order]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dataset", help="a BEIR folder (corpus.jsonl)")
    ap.add_argument("--adapter", action="append", required=True, metavar="NAME=ADAPTER",
                    help="an InfoNCE adapter of --model: a folder or builtin:NAME")
    ap.add_argument("--model", default="smollm2-135m", help="the base model the adapters were trained on")
    ap.add_argument("--max-docs", type=int, default=None)
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args(argv)

    from alignir.retrieval.beir import read_corpus_jsonl

    corpus = read_corpus_jsonl(Path(args.dataset) / "corpus.jsonl", empty="skip")
    texts = [doc.contents for doc in corpus.values()][:args.max_docs]
    command = "python -m benchmarks.archive.aligned_token_spread " + shlex.join(sys.argv[1:] if argv is None else argv)
    rows = []
    for name, adapter, enc in adapter_encoders(args.adapter, args.model):
        H = enc.dense(texts, "document", progress=True)
        row = {"dataset": Path(args.dataset).name, "adapter": name, "source": adapter,
               **spread(enc.fit(H).sparse_documents(H), enc.terms), "command": command}
        print(json.dumps({k: v for k, v in row.items() if k != "command"}), flush=True)
        rows.append(row)
    replace_rows(args.out, rows, ("dataset", "adapter"), wrapped=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
