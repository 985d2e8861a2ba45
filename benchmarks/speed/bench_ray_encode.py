"""Encoding on Ray against one process: documents/s of a collection's rows (the passages
build-index encodes) through the embedding cache, one process on all ``--actors`` cores against
``--actors`` local Ray actors of one core each (encoders/ray_pool.py), with and without the
actors' start-up (each loads the model) counted. Rounds alternate which goes first, each into a
fresh cache; the load average is read before and after every timed run.

Writes benchmarks/results/ray_encode.json::

    python -m benchmarks.speed.bench_ray_encode --datasets adi --rounds 2
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.common import DATASETS

ROOT = Path(__file__).resolve().parents[2]


def _load() -> list[float]:
    return [float(x) for x in Path("/proc/loadavg").read_text().split()[:3]]


def _mem_gib() -> float:
    """Memory available on the machine (GiB): Ray's monitor kills workers above 95 % in use."""
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return round(int(line.split()[1]) / 2**20, 2)
    return float("nan")


def _rows(dataset: Path, embedder) -> list[str]:
    """The texts build-index encodes for ``dataset``: its documents, split into passages as
    ``--passages auto`` splits them."""
    from alignir.retrieval.config import PassageConfig
    from alignir.retrieval.indexer import _passages
    from alignir.retrieval.sources import read_source

    plan, _ = _passages(PassageConfig.parse("auto"), read_source(dataset).texts(), embedder, lambda s: None)
    return list(plan.texts)


def _one_process(embedder, texts: list[str], cache: Path) -> dict:
    from alignir.encoders.cache import EmbeddingCache

    load0, t0 = _load(), time.perf_counter()
    EmbeddingCache(cache).encode_cached(embedder, texts, "document", progress=False)
    seconds = time.perf_counter() - t0
    return {"seconds": round(seconds, 3), "docs_per_s": round(len(texts) / seconds, 3), "load_before": load0,
            "load_after": _load(), "mem_available_gib": _mem_gib()}


def _on_ray(embedder, recipe, texts: list[str], cache: Path, actors: int) -> dict:
    from alignir.encoders.cache import EmbeddingCache, dense_fingerprint, fingerprint_key
    from alignir.encoders.ray_pool import RayEncodePool, RayOptions

    load0, t0 = _load(), time.perf_counter()
    with RayEncodePool(recipe, RayOptions("auto", actors=actors), expected_key=fingerprint_key(
            dense_fingerprint(embedder)), device="cpu") as pool:
        t1 = time.perf_counter()
        EmbeddingCache(cache).encode_cached(embedder, texts, "document", progress=False, runner=pool.encode_chunks)
        t2 = time.perf_counter()
        stats = dict(pool.stats)
    return {"startup_seconds": round(t1 - t0, 3), "encode_seconds": round(t2 - t1, 3),
            "docs_per_s": round(len(texts) / (t2 - t1), 3), "docs_per_s_with_startup": round(len(texts) / (t2 - t0), 3),
            "pool": stats, "load_before": load0, "load_after": _load(), "mem_available_gib": _mem_gib()}


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--datasets", default="adi", help="comma-separated names under $ALIGNIR_SHARED/datasets")
    ap.add_argument("--model", default=None, help="default: the shipped default model")
    ap.add_argument("--actors", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--runtime", default="auto")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "ray_encode.json"))
    args = ap.parse_args(argv)

    import ray
    import torch

    from alignir.encoders.embedders import get_embedder
    from alignir.encoders.models import load_model
    from alignir.encoders.onnx_runtime import apply_runtime
    from alignir.encoders.ray_pool import EncoderRecipe
    from alignir.encoders.shipped import DEFAULT_MODEL, resolve_shipped
    from alignir.retrieval.indexer import DEFAULT_EMBEDDER

    name = args.model or DEFAULT_MODEL
    torch.set_num_threads(args.actors)  # one process on the cores the actors share out
    model, family, opts = resolve_shipped(name, DEFAULT_EMBEDDER, {"max_length": 512}, DEFAULT_EMBEDDER)
    loaded = load_model(model, device="cpu")
    embedder = apply_runtime(get_embedder(family, loaded, progress=False, **opts), args.runtime)
    recipe = EncoderRecipe(model=model, family=family, options=dict(opts),
                           dtype=str(loaded.dtype).replace("torch.", ""), runtime=args.runtime)
    t0 = time.perf_counter()
    ray.init(num_cpus=args.actors, include_dashboard=False, log_to_driver=False)
    cluster_start = time.perf_counter() - t0
    out = {"command": "python -m benchmarks.speed.bench_ray_encode " + " ".join(argv if argv is not None else sys.argv[1:]),
           "model": name, "actors": args.actors, "threads_one_process": args.actors, "threads_per_actor": 1,
           "runtime": args.runtime, "cluster_start_seconds": round(cluster_start, 3),
           "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "ray": ray.__version__},
           "datasets": {}}
    try:
        with tempfile.TemporaryDirectory(prefix="bench-ray-") as tmp:
            for ds in args.datasets.split(","):
                texts = _rows(DATASETS / ds, embedder)
                rounds = []
                for r in range(args.rounds):
                    first_ray = r % 2 == 1
                    row = {"order": "ray first" if first_ray else "one process first"}
                    for which in (("ray", "one") if first_ray else ("one", "ray")):
                        cache = Path(tmp) / f"{ds}-{which}-{r}"
                        row[which] = (_on_ray(embedder, recipe, texts, cache, args.actors) if which == "ray"
                                      else _one_process(embedder, texts, cache))
                    row["ratio"] = round(row["ray"]["docs_per_s"] / row["one"]["docs_per_s"], 3)
                    row["ratio_with_startup"] = round(row["ray"]["docs_per_s_with_startup"] / row["one"]["docs_per_s"], 3)
                    rounds.append(row)
                    print(json.dumps({ds: row}), flush=True)
                out["datasets"][ds] = {
                    "rows": len(texts), "rounds": rounds,
                    "median_ratio": round(statistics.median(r["ratio"] for r in rounds), 3),
                    "median_ratio_with_startup": round(statistics.median(r["ratio_with_startup"] for r in rounds), 3)}
    finally:
        ray.shutdown()
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    return out


if __name__ == "__main__":
    main()
