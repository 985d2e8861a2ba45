"""Quality table + sweeps: BM25, dense, aligned-token sparse (paper's eq.16 and variants),
hybrid, and the fused leg sets with the in-index BM25 leg — nDCG@10 / recall@100 on a BEIR
split, from one built index.

Queries are encoded once; every sparse configuration is a re-sparsify of the stored dense
vectors (no re-encode), so a full sweep costs seconds per configuration.

    python -m benchmarks.quality.bench_quality --index /work/indexes/med-smollm2 \
        --dataset ../shared/datasets/med --out benchmarks/results/quality.json --plots

Rows are merged into --out (replacing rows of the same dataset/model/method); the sweeps go
to benchmarks/results/sweeps/<dataset>-<model>.json and PNG plots beside them.

Lexical leg (retrieval/bm25.py): rows ``bm25-index`` (the index's BM25 leg through the sparse
kernel; checked against the bm25s ``bm25`` row: equal nDCG@10 or the run exits 1),
``hybrid-default`` (the index's dense + sparse, minmax α 0.5: what `alignir eval --mode
hybrid` gives), ``dense+bm25``, ``sparse+bm25``, ``hybrid+bm25`` (= dense+sparse+bm25; the
product default of those modes: z-score, BM25 at 0.6, ``LEG_SET_DEFAULTS`` — chosen by
fusion_transfer.py on the other collections) and their ``-best`` variants (fusion
method and weights chosen on this split, an oracle), from a weight sweep saved to
sweeps/<dataset>-<model>-lexical.json (+ PNG). The fused runs use the Searcher's own fusion
(`retrieval.fusion_plan.fuse_legs`), and the default-weight ones are checked against
`Searcher.batch_search`. An index built without the leg (or before it existed) gets it built
in memory from --dataset's corpus (nothing is written to the index; `alignir add-lexical
--index DIR` stores it). ``--lexical-only`` computes and merges just these rows (the bm25s
anchor is computed for the check but not merged), leaving the other rows as they are.
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

ROOT = Path(__file__).resolve().parents[2]

from benchmarks.common import replace_rows  # noqa: E402
from alignir.index.dense import DenseIndex  # noqa: E402
from alignir.index.sparse import SparseIndex  # noqa: E402
from alignir.retrieval import fusion  # noqa: E402
from alignir.retrieval.beir import load_beir  # noqa: E402
from alignir.retrieval.bm25 import bm25_run, lexical_leg  # noqa: E402
from alignir.retrieval.config import FusionConfig, SparseConfig  # noqa: E402
from alignir.retrieval.metrics import drop_self_hits, evaluate, self_hits_apply  # noqa: E402
from alignir.retrieval.searcher import QueryBatch, Searcher, parse_mode  # noqa: E402
from alignir.retrieval.fusion_plan import LEG_SET_AGREE, LEG_SET_DEFAULTS, fuse_legs  # noqa: E402
from alignir.retrieval.sparsify import Sparsifier, resolve_lambda  # noqa: E402

DEPTH = 100
METRICS = ("ndcg@10", "recall@100")
#: documents are projected once per λ at this K; smaller K are slices of it (sweeps go to 2000)
TOPK_CACHE_K = 2000
#: the paper's method (“A Text is Worth Several Tokens” eq.15-16): raw logits, binary query tokens, no folding, no λ
PAPER = SparseConfig.paper()


class Harness:
    """Everything fixed for one (index, dataset): query encodings, doc vectors, qrels."""

    def __init__(self, index: str, dataset: str, split: str, instruction: str | None, loaded=None):
        self.data = load_beir(dataset, split=split)
        self.searcher = Searcher.open(index, instruction=instruction, loaded=loaded)
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
        self._doc_topk: dict[float, tuple[np.ndarray, np.ndarray]] = {}  # λ -> top-TOPK_CACHE_K
        self.loaded = self.searcher.embedder.loaded
        self.texts = texts
        if st.lexical is None:  # in memory only: the index folder is not touched
            missing = [d for d in self.doc_ids if d not in self.data.corpus]
            if missing:
                raise SystemExit(f"the dataset corpus lacks indexed documents {missing[:5]}")
            st.lexical = lexical_leg([self.data.corpus[d].contents for d in self.doc_ids])
            self.leg_source = "built in memory from the dataset corpus (index lacks the leg)"
        else:
            self.leg_source = "index"
        self.batch = QueryBatch(legs={"dense": self.Hq,
                                      "sparse": self.searcher.sparsifier.queries(self.Hq, self.surface)})

    def _run(self, docs: np.ndarray, scores: np.ndarray) -> dict:
        """Rows (documents, or passages of an index with passages) best first -> a run of
        documents; a document split into passages scores by its best one (MaxP, the default)."""
        pmap = self.searcher.index.passages
        row_doc = None if pmap is None else np.asarray(pmap.doc)
        run = {}
        for qid, drow, srow in zip(self.qids, docs, scores):
            keep = (drow >= 0) & np.isfinite(srow)
            hits: dict[str, float] = {}
            for d, s in zip(drow[keep], srow[keep]):
                hits.setdefault(self.doc_ids[d if row_doc is None else row_doc[d]], float(s))
            run[qid] = hits
        return drop_self_hits(run) if self.drop_self else run

    def score(self, run: dict) -> dict:
        return {m: round(v, 4) for m, v in evaluate(self.data.qrels, run, METRICS).items()
                if m in METRICS}

    def sparse_run(self, cfg: SparseConfig) -> dict:
        cfg = resolve_lambda(cfg, self.H, self.u1)
        tm = self._term_maps.get(cfg.fold)
        sp_ = Sparsifier.for_model(self.loaded, cfg, pc1=self.u1, term_map=tm)
        self._term_maps[cfg.fold] = sp_.term_map
        # the cache keeps at most the tokens a document can have (a tiny vocabulary has fewer)
        cache_k = min(TOPK_CACHE_K, sp_.lm_head.shape[0] - len(np.unique(sp_.special_ids)))
        if cfg.doc_k <= cache_k:  # one projection per λ serves every K, weighting and folding
            if cfg.pc1_lambda not in self._doc_topk:
                self._doc_topk[cfg.pc1_lambda] = sp_.document_topk(self.H, cache_k)
            docs_csr = sp_.documents_from_topk(*self._doc_topk[cfg.pc1_lambda])
        else:
            docs_csr = sp_.documents(self.H)
        index = SparseIndex.from_csr(docs_csr, quantize=cfg.quantize)
        docs, scores = index.search(sp_.queries(self.Hq, self.surface), DEPTH + 1)
        return self._run(docs, scores)

    def dense_run(self, **options) -> dict:
        index = DenseIndex.build(self.H, **options)
        docs, scores = index.search(self.Hq, DEPTH + 1)
        return self._run(docs, scores)


def legs_run(h: Harness, lists: dict, mode: str, method: str,
             weights: dict[str, float] | None = None) -> dict:
    """A fused run of the index's legs with the Searcher's fusion (``weights`` None: equal)."""
    legs = parse_mode(mode)
    w = [1.0 / len(legs)] * len(legs) if weights is None else [weights[leg] for leg in legs]
    total = sum(w)
    cfg = FusionConfig(method=method)
    run = {}
    for i, qid in enumerate(h.qids):
        per_leg = [lists[leg][i] for leg in legs]
        fused = per_leg[0] if len(legs) == 1 else fuse_legs(
            per_leg, [x / total for x in w], cfg, None if weights is None else w,
            anchor=legs.index("bm25") if "bm25" in legs else None, agree_params=LEG_SET_AGREE.get(legs),
            n_docs=len(h.doc_ids))
        run[qid] = {h.doc_ids[d]: float(s) for d, s in fusion.ranked(fused, DEPTH + 1)}
    return drop_self_hits(run) if h.drop_self else run


def product_run(h: Harness, mode: str) -> dict:
    """The same mode through Searcher.batch_search with its default fusion (hybrid: minmax
    α 0.5; leg sets with BM25: LEG_SET_DEFAULTS)."""
    hits = h.searcher.batch_search(h.texts, k=DEPTH + 1, mode=mode, encoded=h.batch)
    run = {qid: {x.id: x.score for x in hs} for qid, hs in zip(h.qids, hits)}
    return drop_self_hits(run) if h.drop_self else run


def _simplex(n: int, step: int = 10) -> list[tuple[float, ...]]:
    """Weight vectors of n legs on a 1/step grid, every weight > 0."""
    if n == 2:
        return [(a / step, (step - a) / step) for a in range(1, step)]
    return [(a / step, b / step, (step - a - b) / step)
            for a in range(1, step) for b in range(1, step - a)]


def lexical_block(h: Harness, anchor: dict, sweep: bool, log) -> tuple[list[tuple], list[dict], list[str]]:
    """Rows of the lexical leg and its fusions: ([(method, metrics, params)], sweep rows,
    failed checks)."""
    lists = h.searcher.leg_lists(h.texts, ("dense", "sparse", "bm25"), k=DEPTH + 1, encoded=h.batch)
    leg = h.searcher.index.lexical
    bm25_params = {k: leg.params.get(k) for k in ("k1", "b", "idf", "stemmer", "stopwords")}
    failed = []
    bm25_m = h.score(legs_run(h, lists, "bm25", "minmax"))
    anchor_m = h.score(anchor)
    equal = abs(bm25_m["ndcg@10"] - anchor_m["ndcg@10"]) < 1e-4
    if not equal:
        failed.append(f"in-index BM25 nDCG@10 {bm25_m['ndcg@10']} != bm25s {anchor_m['ndcg@10']}")
    rows = [("bm25-index", bm25_m, {**bm25_params, "leg": h.leg_source, "scored_by": "index.sparse kernel",
                                     "bm25s_ndcg@10": anchor_m["ndcg@10"], "equals_bm25s": equal})]
    dp = h.searcher.index.dense.params
    index_cfg = {"dense": {"faiss": dp.kind, "center": dp.center, "normalize": dp.normalize},
                 "sparse": h.searcher.index.params.get("sparse"), "bm25": bm25_params}
    names = {"hybrid": "hybrid-default", "dense+bm25": "dense+bm25", "sparse+bm25": "sparse+bm25",
             "dense+sparse+bm25": "hybrid+bm25"}
    for mode, name in names.items():
        legs = parse_mode(mode)
        method, w = LEG_SET_DEFAULTS.get(legs, ("minmax", {leg: 1 / len(legs) for leg in legs}))
        run = legs_run(h, lists, mode, method, w)
        prod = product_run(h, mode)
        if run != prod:
            failed.append(f"{mode}: the bench's fusion differs from Searcher.batch_search")
        rows.append((name, h.score(run), {"mode": mode, "fusion": method,
                                          "weights": {leg: round(x, 4) for leg, x in w.items()},
                                          **{leg: index_cfg[leg] for leg in legs}}))
    sweep_rows = []
    if sweep:
        for mode in ("dense+sparse", "dense+bm25", "sparse+bm25", "dense+sparse+bm25"):
            legs = parse_mode(mode)
            for method in ("minmax", "zscore"):
                for ws in _simplex(len(legs)):
                    weights = dict(zip(legs, ws))
                    m = h.score(legs_run(h, lists, mode, method, weights))
                    sweep_rows.append({"mode": mode, "fusion": method, "weights": weights, **m})
            sweep_rows.append({"mode": mode, "fusion": "rrf", "weights": None,
                               **h.score(legs_run(h, lists, mode, "rrf"))})
            best = max((r for r in sweep_rows if r["mode"] == mode), key=lambda r: r["ndcg@10"])
            log(f"  {mode:18s} best {best['fusion']} {best['weights']} -> nDCG@10 {best['ndcg@10']}")
            if mode != "dense+sparse":
                name = names[mode] + "-best"
                rows.append((name, {k: best[k] for k in METRICS},
                             {"mode": mode, "fusion": best["fusion"], "weights": best["weights"],
                              "selected_on": "this split (oracle)"}))
    return rows, sweep_rows, failed


def plot_lexical(sweep_rows: list[dict], bm25_ndcg: float, title: str, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax, ax3) = plt.subplots(1, 2, figsize=(13, 5))
    for mode in ("dense+sparse", "dense+bm25", "sparse+bm25"):
        for method, ls in (("minmax", "o-"), ("zscore", "s--")):
            pts = [(r["weights"][parse_mode(mode)[0]], r["ndcg@10"]) for r in sweep_rows
                   if r["mode"] == mode and r["fusion"] == method]
            if pts:
                xs, ys = zip(*pts)
                ax.plot(xs, ys, ls, label=f"{mode} {method}")
    ax.axhline(bm25_ndcg, color="gray", ls=":", label="bm25 alone")
    ax.set_xlabel("weight of the first leg (dense; sparse in sparse+bm25)")
    ax.set_ylabel("nDCG@10")
    ax.legend(fontsize=8)
    pts = [r for r in sweep_rows if r["mode"] == "dense+sparse+bm25" and r["fusion"] == "minmax"]
    if pts:
        sc = ax3.scatter([r["weights"]["dense"] for r in pts], [r["weights"]["bm25"] for r in pts],
                         c=[r["ndcg@10"] for r in pts], s=140, cmap="viridis")
        fig.colorbar(sc, ax=ax3, label="nDCG@10")
    ax3.set_xlabel("weight of dense (sparse = 1 - dense - bm25)")
    ax3.set_ylabel("weight of bm25")
    ax3.set_title("dense+sparse+bm25, minmax")
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


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
    replace_rows(path, new, ("dataset", "model", "method"))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--index", required=True)
    ap.add_argument("--dataset", required=True)
    ap.add_argument("--split", default="test")
    ap.add_argument("--instruction", default=None)
    ap.add_argument("--out", default=str(ROOT / "benchmarks/results/quality.json"))
    ap.add_argument("--no-sweeps", action="store_true", help="paper config + index config only")
    ap.add_argument("--plots", action="store_true")
    ap.add_argument("--lexical-only", action="store_true",
                    help="only the BM25-leg rows (and the bm25s anchor); other rows stay as they are")
    args = ap.parse_args(argv)
    command = "python -m benchmarks.quality.bench_quality " + " ".join(shlex.quote(a) for a in (argv or sys.argv[1:]))
    log = lambda s: print(s, file=sys.stderr, flush=True)  # noqa: E731

    t0 = time.perf_counter()
    h = Harness(args.index, args.dataset, args.split, args.instruction)
    model = h.searcher.index.manifest["embedder"]["model"]
    name = h.data.name
    log(f"{name}: {len(h.doc_ids)} docs, {len(h.qids)} queries encoded in {h.query_seconds:.1f}s")

    bm25 = bm25_run(h.data.corpus, h.data.queries, k=DEPTH, show_progress=False)
    bm25 = drop_self_hits(bm25) if h.drop_self else bm25

    def row(method, run_metrics, params):
        return {"dataset": name, "model": model, "method": method, **run_metrics,
                "params": params, "command": command}

    bm25_row = row("bm25", h.score(bm25), {"k1": 0.9, "b": 0.4, "impl": "bm25s lucene idf, porter, en stopwords"})
    lex_rows, lex_sweep, failed = lexical_block(h, bm25, not args.no_sweeps, log)
    lex_rows = [row(*r) for r in lex_rows]
    tag = f"{name}-{model}".replace("/", "_")
    sdir = Path(args.out).parent / "sweeps"
    if lex_sweep:
        sdir.mkdir(parents=True, exist_ok=True)
        (sdir / f"{tag}-lexical.json").write_text(json.dumps(
            {"dataset": name, "model": model, "bm25_leg": h.leg_source, "fusion": lex_sweep,
             "command": command}, indent=1) + "\n")
        if args.plots:
            plot_lexical(lex_sweep, bm25_row["ndcg@10"], f"{name} — {model}: fusion with the BM25 leg",
                         sdir / f"{tag}-lexical.png")
    if args.lexical_only:  # the bm25s anchor is only checked against (bm25-index's params)
        merge_rows(Path(args.out), lex_rows)
        for r in [bm25_row] + lex_rows:
            log(f"{r['method']:22s} nDCG@10 {r['ndcg@10']:.4f}  R@100 {r['recall@100']:.4f}")
        _finish(failed, log, t0)
        return

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

    rows = [
        bm25_row,
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
    ] + lex_rows
    merge_rows(Path(args.out), rows)
    for r in rows:
        log(f"{r['method']:22s} nDCG@10 {r['ndcg@10']:.4f}  R@100 {r['recall@100']:.4f}")
    if sweep_rows:
        sdir.mkdir(parents=True, exist_ok=True)
        (sdir / f"{tag}.json").write_text(json.dumps(
            {"dataset": name, "model": model, "mu1": h.mu1, "sparse": sweep_rows,
             "fusion": fusion_rows, "command": command}, indent=1) + "\n")
        if args.plots:
            plot_sweeps(sweep_rows, fusion_rows, f"{name} — {model}", sdir / f"{tag}.png")
    _finish(failed, log, t0)


def _finish(failed: list[str], log, t0: float) -> None:
    log(f"done in {time.perf_counter() - t0:.0f}s")
    if failed:
        for f in failed:
            log(f"CHECK FAILED: {f}")
        raise SystemExit(1)


if __name__ == "__main__":
    main()
