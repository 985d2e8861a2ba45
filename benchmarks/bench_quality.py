"""Quality table + sweeps: BM25, dense, aligned-token sparse (paper's eq.16 and variants),
hybrid — nDCG@10 / recall@100 on a BEIR split, from one built index.

Queries are encoded once; every sparse configuration is a re-sparsify of the stored dense
vectors (no re-encode), so a full sweep costs seconds per configuration.

    python benchmarks/bench_quality.py --index /work/indexes/med-smollm2 \
        --dataset ../shared/datasets/med --out benchmarks/results/quality.json --plots

Rows are merged into --out (replacing rows of the same dataset/model/method); the sweeps go
to benchmarks/results/sweeps/<dataset>-<model>.json and PNG plots beside them.
"""
from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from index.dense import DenseIndex  # noqa: E402
from index.sparse import SparseIndex  # noqa: E402
from retrieval import fusion  # noqa: E402
from retrieval.beir import load_beir  # noqa: E402
from retrieval.bm25 import bm25_run  # noqa: E402
from retrieval.config import SparseConfig  # noqa: E402
from retrieval.metrics import drop_self_hits, evaluate, self_hits_apply  # noqa: E402
from retrieval.searcher import Searcher  # noqa: E402
from retrieval.sparsify import Sparsifier, resolve_lambda  # noqa: E402

DEPTH = 100
METRICS = ("ndcg@10", "recall@100")
#: the paper's method (seed 004 eq.15-16): raw logits, binary query tokens, no folding, no λ
PAPER = SparseConfig.paper()


class Harness:
    """Everything fixed for one (index, dataset): query encodings, doc vectors, qrels."""

    def __init__(self, index: str, dataset: str, split: str, instruction: str | None):
        self.data = load_beir(dataset, split=split)
        self.searcher = Searcher.open(index, instruction=instruction)
        st = self.searcher.index
        self.doc_ids = st.doc_ids
        self.H = np.array(st.dense_vectors, dtype=np.float32)
        self.qids = list(self.data.queries)
        texts = [self.data.queries[q] for q in self.qids]
        t0 = time.perf_counter()
        enc = self.searcher.embedder
        self.Hq = enc.encode_queries(texts)
        self.surface = enc.surface_token_ids(texts)
        self.query_seconds = time.perf_counter() - t0
        self.drop_self = self_hits_apply(self.data.name)
        self.u1 = st.pc1
        self.mu1 = float((self.H @ self.u1).mean())  # mean projection on u1 (> 0 by orientation)
        self.term_map = self.searcher.sparsifier.term_map
        self._term_maps = {self.term_map.kind == "fold": self.term_map}
        self.loaded = self.searcher.embedder.loaded

    def _run(self, docs: np.ndarray, scores: np.ndarray) -> dict:
        run = {}
        for qid, drow, srow in zip(self.qids, docs, scores):
            keep = (drow >= 0) & np.isfinite(srow)
            run[qid] = {self.doc_ids[d]: float(s) for d, s in zip(drow[keep], srow[keep])}
        return drop_self_hits(run) if self.drop_self else run

    def score(self, run: dict) -> dict:
        return {m: round(v, 4) for m, v in evaluate(self.data.qrels, run, METRICS).items()
                if m in METRICS}

    def sparse_run(self, cfg: SparseConfig) -> dict:
        cfg = resolve_lambda(cfg, self.H, self.u1)
        tm = self._term_maps.get(cfg.fold)
        sp_ = Sparsifier.for_model(self.loaded, cfg, pc1=self.u1, term_map=tm)
        self._term_maps[cfg.fold] = sp_.term_map
        index = SparseIndex.from_csr(sp_.documents(self.H), quantize=cfg.quantize)
        docs, scores = index.search(sp_.queries(self.Hq, self.surface), DEPTH + 1)
        return self._run(docs, scores)

    def dense_run(self, **options) -> dict:
        index = DenseIndex.build(self.H, **options)
        docs, scores = index.search(self.Hq, DEPTH + 1)
        return self._run(docs, scores)


def fuse(dense: dict, sparse: dict, method: str, alpha: float) -> dict:
    out = {}
    for q in dense:
        d, s = dense.get(q, {}), sparse.get(q, {})
        if method == "rrf":
            out[q] = fusion.rrf([d, s], top=DEPTH)
        else:
            out[q] = fusion.fuse([d, s], method=method, alpha=alpha, top=DEPTH)
    return out


def sweeps(h: Harness, log) -> tuple[list[dict], dict]:
    """One-factor sweeps around the paper's configuration, then a small grid of the factors
    that mattered. Returns (all rows, the best sparse config)."""
    rows = []

    def run(label: str, cfg: SparseConfig) -> dict:
        t0 = time.perf_counter()
        m = h.score(h.sparse_run(cfg))
        row = {"sweep": label, "params": cfg.to_dict(), **m, "seconds": round(time.perf_counter() - t0, 2)}
        rows.append(row)
        log(f"  {label:10s} {cfg.to_dict()} -> {m}")
        return row

    for K in (64, 128, 256, 512, 1000, 2000):
        run("K", replace(PAPER, doc_k=K))
    for M in (0, 25, 50, 75, 100):
        run("M", replace(PAPER, query_m=M))
    for c in (0.25, 0.5, 0.75, 1.0, 1.25):
        run("lambda", replace(PAPER, pc1_lambda=round(-c * h.mu1, 4)))
    for dw in ("raw", "relu", "log1p"):
        for qw in ("binary", "raw", "log1p"):
            run("weighting", replace(PAPER, doc_weighting=dw, query_weighting=qw))
    for fold in (False, True):
        run("fold", replace(PAPER, fold=fold))
    for q in ("uint8", "uint16"):
        run("quantize", replace(PAPER, quantize=q))
    # a small grid over what moves quality most in the one-factor sweeps
    best_of = lambda lab: max((r for r in rows if r["sweep"] == lab), key=lambda r: r["ndcg@10"])  # noqa: E731
    lam_opts = sorted({0.0, best_of("lambda")["params"]["pc1_lambda"]})
    w = best_of("weighting")["params"]
    for K in (256, 1000):
        for M in (50, 100):
            for lam in lam_opts:
                for fold in (False, True):
                    run("grid", replace(PAPER, doc_k=K, query_m=M, pc1_lambda=lam, fold=fold,
                                        doc_weighting=w["doc_weighting"],
                                        query_weighting=w["query_weighting"]))
    best = max(rows, key=lambda r: (r["ndcg@10"], r["recall@100"]))
    return rows, SparseConfig.from_dict(best["params"])


def plot_sweeps(rows: list[dict], fusion_rows: list[dict], title: str, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 3, figsize=(14, 8))
    def line(ax, label, key, xlabel, xform=lambda v: v):
        pts = [(xform(r["params"][key]), r["ndcg@10"]) for r in rows if r["sweep"] == label]
        if pts:
            xs, ys = zip(*pts)
            ax.plot(xs, ys, "o-")
        ax.set_xlabel(xlabel)
        ax.set_ylabel("nDCG@10")
    line(axes[0, 0], "K", "doc_k", "K (doc aligned tokens)")
    axes[0, 0].set_xscale("log")
    line(axes[0, 1], "M", "query_m", "M (query expansion)")
    line(axes[0, 2], "lambda", "pc1_lambda", "λ (PC1 adjustment, eq.14)")
    ax = axes[1, 0]
    ws = [r for r in rows if r["sweep"] == "weighting"]
    ax.bar([f"{r['params']['doc_weighting']}/{r['params']['query_weighting']}" for r in ws],
           [r["ndcg@10"] for r in ws])
    ax.set_ylabel("nDCG@10")
    ax.set_xlabel("doc / query weighting")
    ax.tick_params(axis="x", rotation=45)
    ax = axes[1, 1]
    fs = [r for r in rows if r["sweep"] in ("fold", "quantize")]
    ax.bar([("fold" if r["params"]["fold"] else "no fold") if r["sweep"] == "fold"
            else str(r["params"]["quantize"]) for r in fs], [r["ndcg@10"] for r in fs])
    ax.set_xlabel("folding / quantisation")
    ax.set_ylabel("nDCG@10")
    ax = axes[1, 2]
    for method in ("minmax", "zscore"):
        pts = [(r["alpha"], r["ndcg@10"]) for r in fusion_rows if r["fusion"] == method]
        if pts:
            xs, ys = zip(*pts)
            ax.plot(xs, ys, "o-", label=method)
    for r in fusion_rows:
        if r["fusion"] == "rrf":
            ax.axhline(r["ndcg@10"], color="gray", ls="--", label="rrf")
    ax.set_xlabel("α (weight of dense)")
    ax.set_ylabel("nDCG@10")
    ax.legend()
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def merge_rows(path: Path, new: list[dict]) -> None:
    old = json.loads(path.read_text()) if path.exists() else []
    keys = {(r["dataset"], r["model"], r["method"]) for r in new}
    kept = [r for r in old if (r["dataset"], r["model"], r["method"]) not in keys]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(kept + new, indent=1) + "\n")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--index", required=True)
    ap.add_argument("--dataset", required=True)
    ap.add_argument("--split", default="test")
    ap.add_argument("--instruction", default=None)
    ap.add_argument("--out", default=str(ROOT / "benchmarks/results/quality.json"))
    ap.add_argument("--no-sweeps", action="store_true", help="paper config + index config only")
    ap.add_argument("--plots", action="store_true")
    args = ap.parse_args(argv)
    command = "python benchmarks/bench_quality.py " + " ".join(shlex.quote(a) for a in (argv or sys.argv[1:]))
    log = lambda s: print(s, file=sys.stderr, flush=True)  # noqa: E731

    t0 = time.perf_counter()
    h = Harness(args.index, args.dataset, args.split, args.instruction)
    model = h.searcher.index.manifest["embedder"]["model"]
    name = h.data.name
    log(f"{name}: {len(h.doc_ids)} docs, {len(h.qids)} queries encoded in {h.query_seconds:.1f}s")

    bm25 = bm25_run(h.data.corpus, h.data.queries, k=DEPTH, show_progress=False)
    bm25 = drop_self_hits(bm25) if h.drop_self else bm25
    dense = h.dense_run()
    dense_c = h.dense_run(center=True)
    dense_cn = h.dense_run(center=True, normalize=True)
    paper = h.sparse_run(PAPER)
    sweep_rows, best_cfg = ([], PAPER) if args.no_sweeps else sweeps(h, log)
    best = h.sparse_run(best_cfg)
    default_cfg = SparseConfig()

    fusion_rows = []
    best_dense = max((dense, dense_c, dense_cn), key=lambda r: h.score(r)["ndcg@10"])
    for method, alphas in (("minmax", (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)),
                           ("zscore", (0.3, 0.5, 0.7)), ("rrf", (None,))):
        for a in alphas:
            m = h.score(fuse(best_dense, best, method, a if a is not None else 0.5))
            fusion_rows.append({"fusion": method, "alpha": a, **m})
    best_fusion = max(fusion_rows, key=lambda r: r["ndcg@10"])
    default_fusion = next(r for r in fusion_rows if r["fusion"] == "minmax" and r["alpha"] == 0.5)

    def row(method, run_metrics, params):
        return {"dataset": name, "model": model, "method": method, **run_metrics,
                "params": params, "command": command}

    rows = [
        row("bm25", h.score(bm25), {"k1": 0.9, "b": 0.4, "impl": "bm25s lucene idf, porter, en stopwords"}),
        row("dense", h.score(dense), {"faiss": "flat ip", "center": False}),
        row("dense-centered", h.score(dense_c), {"faiss": "flat ip", "center": True}),
        row("dense-centered-cosine", h.score(dense_cn), {"faiss": "flat ip", "center": True, "normalize": True}),
        row("sparse-paper", h.score(paper), PAPER.to_dict()),
        row("sparse-default", h.score(h.sparse_run(default_cfg)),
            resolve_lambda(default_cfg, h.H, h.u1).to_dict()),
        row("sparse-best", h.score(best), {**best_cfg.to_dict(), "selected_on": "this split (oracle)"}),
        row("hybrid", {k: default_fusion[k] for k in METRICS},
            {"fusion": "minmax", "alpha": 0.5,
             "dense": {id(dense): "raw", id(dense_c): "centered", id(dense_cn): "centered-cosine"}[id(best_dense)],
             "sparse": "sparse-best"}),
        row("hybrid-best", {k: best_fusion[k] for k in METRICS},
            {"fusion": best_fusion["fusion"], "alpha": best_fusion["alpha"],
             "selected_on": "this split (oracle)"}),
    ]
    merge_rows(Path(args.out), rows)
    for r in rows:
        log(f"{r['method']:15s} nDCG@10 {r['ndcg@10']:.4f}  R@100 {r['recall@100']:.4f}")
    if sweep_rows:
        tag = f"{name}-{model}".replace("/", "_")
        sdir = Path(args.out).parent / "sweeps"
        sdir.mkdir(parents=True, exist_ok=True)
        (sdir / f"{tag}.json").write_text(json.dumps(
            {"dataset": name, "model": model, "mu1": h.mu1, "sparse": sweep_rows,
             "fusion": fusion_rows, "command": command}, indent=1) + "\n")
        if args.plots:
            plot_sweeps(sweep_rows, fusion_rows, f"{name} — {model}", sdir / f"{tag}.png")
    log(f"done in {time.perf_counter() - t0:.0f}s")


if __name__ == "__main__":
    main()
