"""Passages vs truncation on documents longer than the encoder window.

No long-document collection is at hand, so long documents are emulated: each collection is
indexed with a short ``--max-length`` (64 and 128 tokens: most documents then exceed the
encoder's window) twice, once truncated (``passages="off"``: the encoder sees the first
window of each document, as an index without passages does) and once split into passages (``"auto"``: WINDOW
= the encoder's text budget, STRIDE = WINDOW / 2, every passage its own dense and sparse row,
documents scored by MaxP before fusion; Dai & Callan, "Deeper Text Understanding for IR with
Contextual Neural Language Modeling", SIGIR 2019). Per (collection, max length, passages):

- nDCG@10 and recall@100 of dense, sparse, bm25 and dense+sparse+bm25 (the default fusion,
  and the fixed z-score weights, ``fusion="zscore"``, for comparison); on the passage index also
  dense and sparse with FirstP and sum-of-3 (MaxP is the default);
- the encode cost: ``token_factor`` = text tokens encoded with passages / with truncation
  (the overlap of the windows costs tokens; each truncated document counts its first window),
  and the passage count.

Only quality and token counts are recorded, no timings (the machine is shared).

    nice -n 10 .venv/bin/python -m benchmarks.quality.bench_passages --datasets med,cisi --lengths 64,128 \\
        --work /work/bg/out/passages --out benchmarks/results/passages.json

``--settings off,auto,full`` adds windows that do not overlap (STRIDE = WINDOW): the overlap's
price in encoded tokens against what it buys in nDCG@10 (``token_factor_full``,
``ndcg@10_delta_full`` beside the half-stride ``token_factor``, ``ndcg@10_delta``).

The JSON is rewritten after every (collection, max length) pair, so a run cut short keeps the
rows it finished.
"""
from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

from alignir.encoders.models import load_model
from alignir.encoders.shipped import DEFAULT_MODEL, resolve_shipped
from alignir.index.store import read_manifest
from alignir.retrieval.beir import load_beir, resolve_dataset
from alignir.retrieval.evaluation import evaluate_runs, run_queries
from alignir.retrieval.indexer import build_index
from alignir.retrieval.metrics import self_hits_apply
from alignir.retrieval.searcher import Searcher
from alignir.retrieval.fusion_plan import LEG_SET_FUSION

ROOT = Path(__file__).resolve().parents[2]
MODES = ("dense", "sparse", "bm25", "dense+sparse+bm25")
#: extra runs: (name, mode, search options)
EXTRA = (("dense+sparse+bm25 (zscore)", "dense+sparse+bm25", {"fusion": "zscore"}),)
AGGREGATES = ("firstp", "sum3")


def _evaluate(searcher: Searcher, data, runs_wanted, log) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    drop = self_hits_apply(data.name)
    for name, mode, kw in runs_wanted:
        runs, _ = run_queries(searcher, data.queries, (mode,), k=100, progress=False, drop_self=drop, **kw)
        m = evaluate_runs(data.qrels, {name: runs[mode]})[name]
        out[name] = {"ndcg@10": round(m["ndcg@10"], 4), "recall@100": round(m["recall@100"], 4)}
        log(f"    {name:38s} nDCG@10 {out[name]['ndcg@10']:.4f}")
    return out


def run_pair(name: str, max_length: int, work: Path, model: str, loaded, log,
             settings: tuple[str, ...] = ("off", "auto")) -> dict:
    folder = resolve_dataset(name)
    data = load_beir(folder, split="test")
    row: dict = {"dataset": folder.name, "max_length": max_length, "queries": len(data.queries)}
    window = None
    for passages in settings:
        idx = work / f"{folder.name}-{Path(model).name}-len{max_length}-{passages}"
        # "full": windows that do not overlap (STRIDE = WINDOW, the encoder's text budget)
        spec = f"{window}:{window}" if passages == "full" else passages
        if not (idx / "manifest.json").exists():
            log(f"{name} len {max_length} passages {spec}: building {idx}")
            t = time.perf_counter()
            build_index(folder, idx, model=model, loaded=loaded, passages=spec, progress=False,
                        embedder_options={"max_length": max_length}, on_stage=lambda s: log(f"  {s}"))
            log(f"  built in {time.perf_counter() - t:.0f}s")
        manifest = read_manifest(idx)
        st = manifest["build"]["passages"]
        window = window or st["window"]
        searcher = Searcher.open(idx, loaded=loaded)
        wanted = [(m, m, {}) for m in MODES] + list(EXTRA)
        if passages != "off" and searcher.index.passages is not None:
            wanted += [(f"{m} ({agg})", m, {"passage_agg": agg}) for agg in AGGREGATES for m in ("dense", "sparse")]
        log(f"{name} len {max_length} passages {passages}: {st['rows']} rows for {st['documents']} documents")
        row[f"passages_{passages}"] = {
            "rows": manifest["counts"].get("rows", manifest["counts"]["docs"]),
            "window": st["window"], "stride": st["stride"] if passages != "off" else None,
            "long_documents": st["long_documents"], "split_documents": st["split_documents"],
            "encoded_tokens": st["passage_tokens"] if passages != "off" else st["truncated_tokens"],
            "metrics": _evaluate(searcher, data, wanted, log),
        }
    off = row["passages_off"]
    for passages in settings[1:]:
        on, tag = row[f"passages_{passages}"], "" if passages == "auto" else f"_{passages}"
        row[f"token_factor{tag}"] = round(on["encoded_tokens"] / max(1, off["encoded_tokens"]), 3)
        row[f"ndcg@10_delta{tag}"] = {m: round(on["metrics"][m]["ndcg@10"] - off["metrics"][m]["ndcg@10"], 4)
                                      for m in off["metrics"]}
    return row


def render(result: dict) -> str:
    """The README table of a passages.json: per (collection, max length), nDCG@10 truncated →
    with passages (MaxP) per mode, FirstP / sum-of-3 on the passage index, and the token factor."""
    modes = ("dense", "sparse", "dense+sparse+bm25")  # bm25 scores whole documents either way
    lines = ["| collection | max length | split documents | token factor | "
             + " | ".join(f"{m} truncated → passages" for m in modes)
             + " | dense / sparse FirstP | dense / sparse sum3 |",
             "|---|---|---|---|" + "---|" * len(modes) + "---|---|"]
    for r in result.get("rows", []):
        off, on = r["passages_off"]["metrics"], r["passages_auto"]["metrics"]
        cells = [f"{off[m]['ndcg@10']:.3f} → {on[m]['ndcg@10']:.3f}" for m in modes]
        agg = {a: " / ".join(f"{on[f'{m} ({a})']['ndcg@10']:.3f}" for m in ("dense", "sparse"))
               for a in AGGREGATES}
        lines.append(f"| {r['dataset']} | {r['max_length']} | {r['passages_auto']['split_documents']} of "
                     f"{r['passages_off']['rows']} | "
                     f"{r['token_factor']:.2f} | " + " | ".join(cells) + f" | {agg['firstp']} | {agg['sum3']} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--datasets", default="med,cisi")
    ap.add_argument("--lengths", default="64,128")
    ap.add_argument("--model", default=DEFAULT_MODEL)
    ap.add_argument("--work", type=Path, default=Path("/work/bg/out/passages"))
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "passages.json")
    ap.add_argument("--markdown", action="store_true", help="only print the README table of --out")
    ap.add_argument("--settings", default="off,auto",
                    help="off,auto[,full]: full = windows that do not overlap (STRIDE = WINDOW), against auto's "
                         "STRIDE = WINDOW / 2")
    args = ap.parse_args(argv)
    if args.markdown:
        print(render(json.loads(args.out.read_text())))
        return 0

    def log(msg: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)

    args.work.mkdir(parents=True, exist_ok=True)
    result = json.loads(args.out.read_text()) if args.out.exists() else {}
    result.update({
        "what": "passages (auto: WINDOW = the encoder's text budget, STRIDE = WINDOW/2, MaxP) vs truncation "
                "(off) with a short --max-length emulating long documents; nDCG@10 / recall@100 per mode; "
                "token_factor = text tokens encoded with passages / with truncation",
        "model": args.model, "embedder": resolve_shipped(args.model, "prompteol", None)[1],
        "default_fusion": LEG_SET_FUSION,
        "command": "python -m benchmarks.quality.bench_passages " + " ".join(argv if argv is not None else sys.argv[1:]),
        "python": platform.python_version(),
    })
    loaded = load_model(resolve_shipped(args.model, "prompteol", None)[0], device="cpu")  # a shipped name: its base
    for name in [d.strip() for d in args.datasets.split(",") if d.strip()]:
        for length in [int(x) for x in args.lengths.split(",")]:
            settings = tuple(x.strip() for x in args.settings.split(",") if x.strip())
            if settings[:2] != ("off", "auto") or not set(settings) <= {"off", "auto", "full"}:
                raise SystemExit(f"--settings must start with off,auto and may add full, got {args.settings!r}")
            row = run_pair(name, length, args.work, args.model, loaded, log, settings)
            row["command"], row["model"] = result["command"], args.model
            # re-read: another run may have written its rows meanwhile (keep them)
            old = json.loads(args.out.read_text()).get("rows", []) if args.out.exists() else []
            rows = {(r["dataset"], r["max_length"]): r for r in old}
            rows[(row["dataset"], length)] = row
            result["rows"] = sorted(rows.values(), key=lambda r: (r["dataset"], r["max_length"]))
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(result, indent=1) + "\n")
            log(f"written {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
