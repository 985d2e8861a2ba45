"""Default-model choice: retrieval quality per CPU-second of the shipped models.

For each model (SmolLM2-135M-Instruct, Gemma3-270M base) and collection (Cranfield in full,
a SciFact sample: every test query's relevant documents plus random distractors up to
``--sample-docs``), build an alignir index with the default options (PromptEOL, K=256, M=50)
and score dense / sparse / hybrid nDCG@10. The cost side is measured on the same
``--cost-docs`` documents per collection with the embedding cache off: process CPU seconds
(all threads, ``getrusage``) and wall seconds to encode them, plus the one-off model load.
Quality comes from cached encodings when they exist (it does not depend on how long the
encode took), cost never does.

    python -m benchmarks.defaults.bench_model_choice            # writes results/model_choice.json
"""
from __future__ import annotations

import argparse
import json
import platform
import resource
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

from benchmarks.common import DATASETS  # noqa: E402
from benchmarks.quality.beir_sample import write_sample  # noqa: E402
from alignir.retrieval.beir import load_beir  # noqa: E402

MODES = ("dense", "sparse", "hybrid")


def cpu_seconds() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def encode_cost(model: str, folder: Path, n_docs: int, max_length: int) -> dict:
    """CPU and wall seconds to load ``model`` and encode ``n_docs`` documents of ``folder``
    (cache off), plus their real token count."""
    from alignir.encoders.embedders import get_embedder
    from alignir.encoders.models import load_model

    texts = load_beir(folder).corpus.texts()[:n_docs]
    c0, w0 = cpu_seconds(), time.perf_counter()
    loaded = load_model(model)
    c1, w1 = cpu_seconds(), time.perf_counter()
    enc = get_embedder("prompteol", loaded, progress=True, max_length=max_length)
    enc.encode_documents(texts)
    c2, w2 = cpu_seconds(), time.perf_counter()
    tok = loaded.tokenizer(texts, add_special_tokens=False, truncation=True, max_length=max_length)
    return {"cost_docs": len(texts), "load_cpu_s": round(c1 - c0, 2), "load_wall_s": round(w1 - w0, 2),
            "encode_cpu_s": round(c2 - c1, 2), "encode_wall_s": round(w2 - w1, 2),
            "cpu_s_per_doc": round((c2 - c1) / len(texts), 4),
            "text_tokens": int(sum(len(t) for t in tok["input_ids"]))}


def quality(model: str, folder: Path, index_root: Path, max_length: int) -> dict:
    from alignir.retrieval.evaluation import timed_eval
    from alignir.retrieval.indexer import build_index
    from alignir.retrieval.searcher import Searcher

    index = index_root / f"mc-{folder.name}-{model}"
    build_index(folder, index, model=model, embedder_options={"max_length": max_length},
                on_stage=lambda s: print(f"[{model}/{folder.name}] {s}", flush=True))
    data = load_beir(folder)
    out = timed_eval(Searcher.open(index), data, MODES, k=100)
    return {f"ndcg@10_{m}": round(out["metrics"][m]["ndcg@10"], 4) for m in MODES} | {
        f"recall@100_{m}": round(out["metrics"][m]["recall@100"], 4) for m in MODES} | {
        "index": str(index), "n_docs": len(data.corpus), "n_queries": len(data.queries)}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=["smollm2-135m", "gemma3-270m"])
    ap.add_argument("--data", type=Path, default=DATASETS)
    ap.add_argument("--index-root", type=Path, default=ROOT / "indexes")
    ap.add_argument("--sample-docs", type=int, default=1000)
    ap.add_argument("--cost-docs", type=int, default=64)
    ap.add_argument("--max-length", type=int, default=512)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "model_choice.json")
    ap.add_argument("--cost-only", action="store_true",
                    help="re-measure only the cost side (e.g. on a quieter machine), keeping the "
                         "quality numbers of the rows already in --out")
    args = ap.parse_args(argv)
    previous = {}
    if args.cost_only:
        if not args.out.is_file():
            ap.error(f"--cost-only needs the quality rows of an earlier run in {args.out}")
        previous = {(r["model"], r["dataset"]): r for r in json.loads(args.out.read_text())["rows"]}

    folders = [args.data / "cran",
               write_sample(args.data / "scifact", args.index_root / f"scifact-sample{args.sample_docs}",
                            args.sample_docs)]
    rows = []
    for model in args.models:
        for folder in folders:
            row = {"model": model, "dataset": folder.name}
            if args.cost_only:
                if (model, folder.name) not in previous:
                    ap.error(f"no quality row for {model} on {folder.name} in {args.out}")
                row.update({k: v for k, v in previous[(model, folder.name)].items()
                            if k.startswith(("ndcg@10_", "recall@100_")) or k in ("index", "n_docs", "n_queries")})
                row.pop("ndcg@10_per_cpu_s_per_doc", None)
            else:
                row.update(quality(model, folder, args.index_root, args.max_length))
            row.update(encode_cost(model, folder, args.cost_docs, args.max_length))
            best = max(row[f"ndcg@10_{m}"] for m in MODES)
            row["best_ndcg@10"] = best
            row["ndcg@10_per_cpu_s_per_doc"] = round(best / row["cpu_s_per_doc"], 3)
            rows.append(row)
            print(json.dumps(row), flush=True)
    cmd = "python -m benchmarks.defaults.bench_model_choice " + " ".join(argv if argv is not None else sys.argv[1:])
    import torch

    if args.cost_only:
        old_doc = json.loads(args.out.read_text())
        cmd = f"{old_doc['command']}  (quality)  +  {cmd.strip()}  (cost, {time.strftime('%Y-%m-%d')})"
    result = {"rows": rows, "command": cmd.strip(), "threads": torch.get_num_threads(),
              "torch": torch.__version__, "machine": f"{platform.machine()} {__import__('os').cpu_count()} cpus",
              "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
