"""The GPU path end to end, in one run: the real default model (its adapter is in the tree) with
the tokenizer's threads on, ``alignir beir`` on MED and SciFact on the GPU, against the CPU rows.

For each collection:

1. ``alignir beir DATASET --model MODEL --json`` in this process (the product's command: build
   the index on the device, evaluate every mode): its nDCG@10 per mode beside the committed CPU
   row of the same model (``--reference``, benchmarks/results/training.json's
   ``runs["COLLECTION/MODEL"]``), each within ``--tolerance`` (0.002) or not.
2. Documents/s: the build's encode (``manifest.build.encode_seconds``: read, encode, analyse) and
   the product's encode alone (``EmbeddingCache.encode_cached`` of the index's rows into a fresh
   cache, after a warm-up); the goal is ``--goal`` (2,000) documents/s on SciFact.
3. Query latency at batch 1 (``Searcher.search``, default mode, k 10): p50 and p99.
4. FAISS on the GPU for the dense leg: the top-10 of every query from the GPU copy (faiss-gpu)
   against the CPU index; when faiss has no GPU here, why.

Writes benchmarks/results/gpu_e2e.json. On a GPU machine that can fetch nothing:
``bash benchmarks/gpu/gpu_carry.sh .gpu_carry`` here first; the carried folders travel in calls
of at most 64 MiB with the work tree, its adapters but the default's set aside (``python -m
benchmarks.gpu.device_tree set-aside --keep encoders/adapters/smollm2-135m-alignir-v4``; g1, then g2,
then g3, then whl with data; a folder carried once stays on the warm machine), and the run itself is one call of about 5 minutes, which calls::

    bash benchmarks/gpu/gpu_e2e.sh .gpu_carry $OUT/gpu_e2e.json
    # = python -m benchmarks.gpu.gpu_e2e --data CARRY/data --out OUT/gpu_e2e.json

faiss-gpu is used when a faiss_gpu wheel is carried in whl/ (with the CUDA 12 cuBLAS and runtime
it needs, which the CUDA 13 image lacks); otherwise the JSON says the dense leg stayed on the CPU.

``--device cpu`` runs the same steps with CUDA hidden (how the script is tested, on the tiny model).
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.common import DATASETS

ROOT = Path(__file__).resolve().parents[2]
#: the tokenizer setting found at start (the product turns its threads on beside a GPU unless a user chose)
_TOKENIZER_SETTING = os.environ.get("TOKENIZERS_PARALLELISM")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--datasets", default="med,scifact", help="comma-separated names under --data, or folders")
    ap.add_argument("--data", default=str(DATASETS))
    ap.add_argument("--model", default=None, help="default: the shipped default model")
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    ap.add_argument("--reference", default=str(ROOT / "benchmarks" / "results" / "training.json"),
                    help="JSON with runs['COLLECTION/MODEL'] = {'ndcg@10_MODE': value, ...} (the CPU rows)")
    ap.add_argument("--tolerance", type=float, default=0.002)
    ap.add_argument("--goal", type=float, default=2000.0, help="documents/s of the product's encode on SciFact")
    ap.add_argument("--latency-queries", type=int, default=200)
    ap.add_argument("--work", default=None, help="indexes and caches (default: a temporary folder)")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "gpu_e2e.json"))
    args = ap.parse_args(argv)
    if args.tolerance < 0 or args.latency_queries < 1:
        ap.error("--tolerance must be >= 0 and --latency-queries >= 1")
    return args


def reference_rows(path: str | Path, collection: str, model: str) -> dict[str, float]:
    """{mode: nDCG@10} of ``model`` on ``collection`` in a reference file (empty when absent)."""
    p = Path(path)
    if not p.is_file():
        return {}
    row = json.loads(p.read_text()).get("runs", {}).get(f"{collection}/{model}", {})
    return {k[len("ndcg@10_"):]: float(v) for k, v in row.items() if k.startswith("ndcg@10_")}


def compare_rows(measured: dict[str, float], reference: dict[str, float], tolerance: float) -> dict[str, Any]:
    """Each mode of ``reference`` against ``measured``: the difference and whether it is within
    ``tolerance``; ``all_within`` is False when a mode is missing or off, None with no reference."""
    modes = {}
    for mode, ref in sorted(reference.items()):
        got = measured.get(mode)
        diff = None if got is None else round(got - ref, 4)
        modes[mode] = {"gpu": got, "cpu": ref, "diff": diff,
                       "within": diff is not None and abs(diff) <= tolerance + 1e-9}
    return {"tolerance": tolerance, "modes": modes,
            "all_within": all(m["within"] for m in modes.values()) if modes else None}


def _beir(dataset: Path, model: str, index: Path, cache: Path) -> tuple[dict, float]:
    """``alignir beir`` in this process: (its JSON, wall seconds)."""
    from alignir.retrieval.cli import app

    argv = ["beir", str(dataset), "--model", model, "--index", str(index), "--cache-dir", str(cache), "--json"]
    buf = io.StringIO()
    t0 = time.perf_counter()
    with contextlib.redirect_stdout(buf):
        app(argv, standalone_mode=False)
    return json.loads(buf.getvalue()), time.perf_counter() - t0


def _encode_rate(index: Path, device: str) -> dict[str, Any]:
    """Documents/s of the product's encode (the embedding cache's, as a build runs it) over the
    index's rows, into a fresh cache after a warm-up of 256 rows."""
    from alignir.encoders.cache import EmbeddingCache
    from alignir.index.store import open_index
    from alignir.retrieval.config import PassageConfig
    from alignir.retrieval.encoder import Encoder
    from alignir.retrieval.indexer import _passages
    from alignir.retrieval.sources import read_source

    stored = open_index(index, verify=False, parts=())
    enc = Encoder.from_index(index, device=device)
    texts = read_source(stored.manifest["build"]["source"]).texts()
    # the rows `alignir beir` encoded: documents split into passages as --passages auto splits them
    plan, _ = _passages(PassageConfig.parse("auto"), texts, enc.embedder, lambda s: None)
    rows = list(plan.texts)
    with tempfile.TemporaryDirectory(prefix="gpu-e2e-") as tmp:
        EmbeddingCache(Path(tmp) / "warm").encode_cached(enc.embedder, rows[:256], "document", progress=False)
        _sync()
        t0 = time.perf_counter()
        EmbeddingCache(Path(tmp) / "timed").encode_cached(enc.embedder, rows, "document", progress=False)
        _sync()
        seconds = time.perf_counter() - t0
    return {"rows": len(rows), "documents": len(texts), "seconds": round(seconds, 3),
            "rows_per_s": round(len(rows) / seconds, 1), "docs_per_s": round(len(texts) / seconds, 1),
            "dtype": str(enc.loaded.dtype).replace("torch.", ""), "model_device": str(enc.loaded.device)}


def _sync() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()


def _latency_and_faiss(index: Path, queries: list[str], device: str, n: int) -> dict[str, Any]:
    """Query p50/p99 at batch 1 (default mode, k 10), then the dense leg's top-10 from FAISS on
    the GPU against FAISS on the CPU."""
    import numpy as np

    from alignir.retrieval.searcher import Searcher

    out: dict[str, Any] = {}
    with Searcher.open(index, device=device) as s:
        for q in queries[:3]:
            s.search(q, k=10)  # warm-up
        times = []
        for q in queries[:n]:
            t0 = time.perf_counter()
            s.search(q, k=10)
            times.append(1000 * (time.perf_counter() - t0))
        times.sort()
        out["latency"] = {"queries": len(times), "p50_ms": round(statistics.median(times), 2),
                          "p99_ms": round(times[min(len(times) - 1, int(0.99 * len(times)))], 2)}
        dense = s.index.dense
        if dense is None:
            out["faiss_gpu"] = {"on_gpu": False, "why": "the index has no dense leg"}
            return out
        Q = s.embedder.encode_queries(queries)
        dense.use_gpu(False)
        cpu_ids, _ = dense.search(Q, 10)
        on_gpu = dense.use_gpu(True)
        row: dict[str, Any] = {"on_gpu": bool(on_gpu), "queries": len(queries)}
        if on_gpu:
            gpu_ids, _ = dense.search(Q, 10)
            same = [list(a) == list(b) for a, b in zip(np.asarray(cpu_ids), np.asarray(gpu_ids))]
            overlap = [len(set(a) & set(b)) / 10 for a, b in zip(np.asarray(cpu_ids), np.asarray(gpu_ids))]
            row.update(identical_top10=int(sum(same)), mean_overlap=round(float(np.mean(overlap)), 4),
                       all_identical=all(same))
        else:
            row["why"] = _faiss_gpu_why()
        out["faiss_gpu"] = row
    return out


def _faiss_gpu_why() -> str:
    import faiss

    if not hasattr(faiss, "StandardGpuResources"):
        return f"faiss {faiss.__version__} is a CPU build (faiss-gpu is not installed)"
    return f"faiss {faiss.__version__} sees {faiss.get_num_gpus()} GPUs"


def _queries(dataset: Path) -> list[str]:
    from alignir.retrieval.beir import load_beir

    return list(load_beir(str(dataset)).queries.values())


def run(args: argparse.Namespace) -> dict[str, Any]:
    if args.device == "cpu":
        os.environ["CUDA_VISIBLE_DEVICES"] = ""
    import torch

    from alignir.encoders.shipped import DEFAULT_MODEL

    model = args.model or DEFAULT_MODEL
    found = {"TOKENIZERS_PARALLELISM": _TOKENIZER_SETTING}
    os.environ.pop("TOKENIZERS_PARALLELISM", None)  # the product's choice: threads on beside a GPU
    out: dict[str, Any] = {
        "command": "python -m benchmarks.gpu.gpu_e2e " + " ".join(_argv(args)),
        "model": model, "device": args.device,
        "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "torch": torch.__version__,
                    "tokenizer_setting_found": found},
        "goal_docs_per_s": args.goal, "collections": {}}
    with contextlib.ExitStack() as stack:
        work = Path(args.work) if args.work else Path(stack.enter_context(tempfile.TemporaryDirectory()))
        for name in args.datasets.split(","):
            folder = Path(name) if Path(name).is_dir() else Path(args.data) / name
            index = work / f"{folder.name}-index"
            result, seconds = _beir(folder, model, index, work / f"{folder.name}-cache")
            measured = {m: float(v["ndcg@10"]) for m, v in result["metrics"].items()}
            manifest = json.loads((index / "manifest.json").read_text())
            build = manifest.get("build", {})
            docs = manifest["counts"]["docs"]
            row: dict[str, Any] = {
                "documents": docs, "queries": result["queries"], "beir_seconds": round(seconds, 2),
                "build": {"encode_seconds": build.get("encode_seconds"), "runtime": build.get("runtime"),
                          "docs_per_s": round(docs / build["encode_seconds"], 1) if build.get("encode_seconds") else None},
                "ndcg@10": measured,
                "against_cpu": compare_rows(measured, reference_rows(args.reference, folder.name, model), args.tolerance),
                "encode": _encode_rate(index, args.device)}
            row.update(_latency_and_faiss(index, _queries(folder), args.device, args.latency_queries))
            if folder.name == "scifact":
                row["goal_met"] = row["encode"]["docs_per_s"] >= args.goal
            out["collections"][folder.name] = row
            print(json.dumps({folder.name: row}), flush=True)
    out["machine"]["tokenizer_setting_used"] = os.environ.get("TOKENIZERS_PARALLELISM")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    return out


def _argv(args: argparse.Namespace) -> list[str]:
    return [f"--{k.replace('_', '-')}={v}" for k, v in vars(args).items() if v is not None]


def main(argv: list[str] | None = None) -> dict[str, Any]:
    return run(parse_args(argv))


if __name__ == "__main__":
    main()
