"""The encoder on a GPU, checked and measured in one short run (writes one JSON file).

Made to run on a lent GPU machine that can fetch nothing: it needs torch with CUDA,
transformers, peft, numba, scipy, pyarrow and tqdm, and none of faiss, bm25s, pytrec_eval or
gguf (it imports only the encoder side of alignir and the numba inverted index).

1. **Same vectors on the GPU.** The tiny test model (alignir.encoders.testing: a seeded 2-layer Llama,
   d = 32, byte-level BPE) encodes a toy corpus and queries on the CPU (fp32) and on the GPU
   (fp32, then the GPU default bf16); per-row cosine to the CPU vectors and the top-10 of the
   dense (exact inner product) and aligned-token sparse legs (numba inverted index) on a toy index
   of 300 distinct texts (``--corpus``'s first ones).
2. **Encoder speed of the shipped architecture.** SmolLM2-135M's architecture (LlamaConfig with
   its sizes) with random weights: throughput does not depend on the values. Documents of
   exactly ``--doc-tokens`` text tokens (the real SmolLM2 tokenizer when ``--tokenizer`` is given,
   real text from ``--corpus``) go through the product's PromptEOL embedder at batch 1 / 32 / 128
   and at the device's own budget (encoders.batching), bf16 weights, pooled and projected in
   fp32: documents/s and tokens/s of a second pass (the first, which meets each batch shape for
   the first time, is reported beside it), with and without the aligned-token top-K, and through
   the embedding cache an index build writes its parts with (encoders.cache, a first pass). Query p50/p99 at batch 1 (embedder + top-M expansion + surface tokens).
   The forward's FLOP rate is set against a bf16 matmul measured in the same run.
3. **LoRA training steps/s.** ``alignir train infonce`` (encoders.train.trainer.train) on the same
   architecture, r 16 on every linear layer, bf16, the shipped recipe's batch 8 at 96 tokens
   and batch 32.

    python -m benchmarks.gpu.gpu_check --out benchmarks/results/gpu_check.json \\
        --tokenizer .gpu_carry/smollm2-tokenizer --corpus .gpu_carry/med-corpus.jsonl

Run it from the repository root. On a machine
without CUDA it runs the same steps on the CPU at a reduced size (``--device cpu``),
which is how the script itself is tested.
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

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np
import torch

#: SmolLM2-135M(-Instruct)'s configuration (its config.json; the GGUF holds the same sizes)
SMOLLM2_135M = dict(hidden_size=576, intermediate_size=1536, num_hidden_layers=30, num_attention_heads=9,
                    num_key_value_heads=3, max_position_embeddings=8192, rms_norm_eps=1e-5, rope_theta=100000.0,
                    tie_word_embeddings=True, vocab_size=49152)

QUERIES = ["effects of light on plant growth", "central bank interest rates and stock prices",
           "heat transfer in supersonic flow", "ranking documents by relevance", "how proteins fold",
           "a fox and a dog"]


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _cos_rows(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    na, nb = np.linalg.norm(a, axis=1), np.linalg.norm(b, axis=1)
    return (a * b).sum(1) / np.maximum(na * nb, 1e-12)


def _tiny_loaded(device: str, dtype: torch.dtype):
    from alignir.encoders.models import wrap_model
    from alignir.encoders.testing import tiny_model

    cpu = tiny_model()
    model = cpu.model.to(dtype)
    return wrap_model("tiny-llama", cpu.tokenizer, model, cpu.identity, device)


def _top10(sparsifier, docs_h, q_h, q_surface):
    """Top-10 doc numbers of each query by the dense leg (exact inner product of L2-normalised
    vectors) and the aligned-token sparse leg (numba inverted index)."""
    from alignir.index.sparse import SparseIndex

    dn = docs_h / np.maximum(np.linalg.norm(docs_h, axis=1, keepdims=True), 1e-12)
    qn = q_h / np.maximum(np.linalg.norm(q_h, axis=1, keepdims=True), 1e-12)
    dense = np.argsort(-(qn @ dn.T), axis=1, kind="stable")[:, :10]
    index = SparseIndex.from_csr(sparsifier.documents(docs_h))
    qv = sparsifier.queries(q_h, q_surface)
    ids, _scores = index.search(qv, 10)
    sparse = [[int(x) for x in row if x >= 0] for row in np.asarray(ids)]
    return dense.tolist(), sparse


def _toy_corpus(corpus: str | None, n: int = 300) -> list[str]:
    """``n`` distinct texts: the first of ``corpus`` (BEIR jsonl), else the tiny corpus with
    numbered variants (distinct texts: duplicates would tie exactly and make the order arbitrary)."""
    if corpus and Path(corpus).is_file():
        with open(corpus) as fh:
            rows = [json.loads(line) for _, line in zip(range(n), fh)]
        return [(r.get("title", "") + " " + r["text"]).strip()[:600] for r in rows]
    from alignir.encoders.testing import TINY_CORPUS

    return [f"{TINY_CORPUS[i % len(TINY_CORPUS)]} ({i})" for i in range(n)]


def _overlap(a: list[list[int]], b: list[list[int]]) -> dict:
    same = sum(x == y for x, y in zip(a, b))
    shared = [len(set(x) & set(y)) / max(1, len(x)) for x, y in zip(a, b)]
    return {"queries": len(a), "identical_top10": same, "mean_top10_overlap": float(np.mean(shared))}


def check_tiny(device: str, corpus: str | None) -> dict:
    """Step 1: the tiny model's vectors on ``device`` against the CPU's."""
    from alignir.encoders.embedders.prompteol import PromptEOLEmbedder
    from alignir.retrieval.config import SparseConfig
    from alignir.retrieval.sparsify import Sparsifier

    docs = _toy_corpus(corpus)
    queries = QUERIES + [d[:80] for d in docs[::15]]
    cpu = _tiny_loaded("cpu", torch.float32)
    ref = PromptEOLEmbedder(cpu, progress=False)
    d_ref, q_ref = ref.encode_documents(docs), ref.encode_queries(queries)
    surface = ref.surface_token_ids(queries)
    config = SparseConfig(doc_k=16, query_m=8)
    sp_ref = Sparsifier.for_model(cpu, config)
    top_ref = _top10(sp_ref, d_ref, q_ref, surface)
    out = {"documents": len(docs), "queries": len(queries)}
    dtypes = [torch.float32] + ([torch.bfloat16] if torch.device(device).type == "cuda" else [])
    for dt in dtypes:
        loaded = _tiny_loaded(device, dt)
        emb = PromptEOLEmbedder(loaded, progress=False)
        d, q = emb.encode_documents(docs), emb.encode_queries(queries)
        sp = Sparsifier.for_model(loaded, config)
        top = _top10(sp, d, q, surface)
        cos = np.concatenate([_cos_rows(d, d_ref), _cos_rows(q, q_ref)])
        out[str(dt).replace("torch.", "")] = {
            "min_cosine": float(cos.min()), "mean_cosine": float(cos.mean()),
            "same_dense_top10": top[0] == top_ref[0], "same_sparse_top10": top[1] == top_ref[1],
            "dense": _overlap(top[0], top_ref[0]), "sparse": _overlap(top[1], top_ref[1]),
            "model_device": str(next(loaded.model.parameters()).device)}
    return out


def _docs_of_tokens(tokenizer, corpus: str | None, n: int, n_tokens: int) -> list[str]:
    """``n`` texts of exactly ``n_tokens`` tokens: real text from ``corpus`` (BEIR jsonl),
    concatenated and cut at token boundaries, or the tiny corpus repeated."""
    if corpus and Path(corpus).is_file():
        with open(corpus) as fh:
            texts = [(json.loads(line).get("title", "") + " " + json.loads(line)["text"]).strip() for line in fh]
    else:
        from alignir.encoders.testing import TINY_CORPUS

        texts = list(TINY_CORPUS)
    ids: list[int] = []
    for t in texts:
        ids.extend(tokenizer(t + " ", add_special_tokens=False)["input_ids"])
        if len(ids) >= n * n_tokens:
            break
    while len(ids) < n * n_tokens:
        ids = ids + ids
    out = []
    for i in range(n):
        chunk = ids[i * n_tokens:(i + 1) * n_tokens]
        text = tokenizer.decode(chunk)
        out.append(text)
    return out


def _smollm2_loaded(device: str, dtype: torch.dtype, tokenizer_dir: str | None, layers: int | None):
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from alignir.encoders.models import wrap_model

    if tokenizer_dir:
        tok = AutoTokenizer.from_pretrained(tokenizer_dir)
    else:
        from alignir.encoders.testing import train_tokenizer

        tok = train_tokenizer(False)
    cfg = dict(SMOLLM2_135M)
    if layers:
        cfg["num_hidden_layers"] = layers
    if not tokenizer_dir:
        cfg["vocab_size"] = len(tok)
    torch.manual_seed(0)
    config = LlamaConfig(**cfg, pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id)
    with torch.device(device):
        model = LlamaForCausalLM(config).to(dtype)
    loaded = wrap_model("smollm2-135m-architecture", tok, model, {"name": "smollm2-135m-architecture",
                                                                   "source": "random-init", "seed": 0}, device)
    return loaded, config


def _forward_flops_per_token(config, seq: int) -> float:
    """2·(parameters outside the embeddings) + causal attention 2·2·L·d·(seq/2) per token."""
    d, inner, layers = config.hidden_size, config.intermediate_size, config.num_hidden_layers
    kv = d * config.num_key_value_heads // config.num_attention_heads
    per_layer = d * d * 2 + d * kv * 2 + 3 * d * inner  # q, o, k, v, gate/up/down
    return 2.0 * layers * per_layer + 4.0 * layers * d * (seq / 2)


def matmul_tflops(device: torch.device, n: int, reps: int) -> float:
    dt = torch.bfloat16 if device.type == "cuda" else torch.float32
    a = torch.randn(n, n, device=device, dtype=dt)
    b = torch.randn(n, n, device=device, dtype=dt)
    for _ in range(3):
        a @ b
    _sync(device)
    t0 = time.perf_counter()
    for _ in range(reps):
        a @ b
    _sync(device)
    return 2 * n ** 3 * reps / (time.perf_counter() - t0) / 1e12


def bench_encoder(device: str, tokenizer_dir: str | None, corpus: str | None, doc_tokens: int,
                  batches: list[int], n_docs: dict[int, int], layers: int | None, n_queries: int,
                  compiled: bool = True) -> dict:
    """Step 2: documents/s and query latency of the SmolLM2 architecture."""
    from alignir.encoders.embedders.prompteol import PromptEOLEmbedder
    from alignir.retrieval.config import SparseConfig
    from alignir.retrieval.sparsify import Sparsifier

    dev = torch.device(device)
    dtype = torch.bfloat16 if dev.type == "cuda" else torch.float32
    loaded, config = _smollm2_loaded(device, dtype, tokenizer_dir, layers)
    sparsifier = Sparsifier.for_model(loaded, SparseConfig())
    most = max(n_docs.values())
    docs = _docs_of_tokens(loaded.tokenizer, corpus, most, doc_tokens)
    rows = []
    for label in [*batches, "auto", *(["auto-compiled"] if compiled else [])]:
        if label in ("auto", "auto-compiled"):
            emb = PromptEOLEmbedder(loaded, progress=False, max_length=doc_tokens + 64,
                                    compile=label == "auto-compiled")
            n = most
        else:
            emb = PromptEOLEmbedder(loaded, progress=False, max_length=doc_tokens + 64,
                                    max_batch_size=label, batch_tokens=label * (doc_tokens + 64))
            n = n_docs[label]
        sample = docs[:n]
        _sync(dev)
        t0 = time.perf_counter()
        emb.encode_documents(sample)  # the first pass meets each batch shape for the first time
        _sync(dev)
        t_first = time.perf_counter() - t0
        t0 = time.perf_counter()
        H = emb.encode_documents(sample)
        _sync(dev)
        t_enc = time.perf_counter() - t0
        stats = dict(emb.last_stats)
        t0 = time.perf_counter()
        csr = sparsifier.documents(H)
        _sync(dev)
        t_sparse = time.perf_counter() - t0
        seq = stats["n_tokens"] / max(1, n)
        flops = _forward_flops_per_token(config, seq) * stats["n_tokens"]
        rows.append({"batch": label, "batch_tokens": emb.batch_tokens, "max_batch_size": emb.max_batch_size,
                     "documents": n, "tokens_per_document": seq, "padding_share":
                     1 - stats["n_tokens"] / max(1, stats["n_padded_tokens"]), "n_batches": stats["n_batches"],
                     "encode_seconds": t_enc, "documents_per_s": n / t_enc, "documents_per_s_first_pass": n / t_first, "tokens_per_s": stats["n_tokens"] / t_enc,
                     "forward_tflops": flops / t_enc / 1e12, "topk_seconds": t_sparse,
                     "documents_per_s_with_aligned_topk": n / (t_enc + t_sparse),
                     "aligned_terms_per_document": csr.nnz / n})
        print(json.dumps(rows[-1]), flush=True)
    # the forward alone over the same batches, tokenized and padded beforehand: what the GPU
    # could do if the CPU side (tokenizing, padding) cost nothing
    emb = PromptEOLEmbedder(loaded, progress=False, max_length=doc_tokens + 64)
    ids, pos, _empty, _ = emb.prepare(docs[:most], "document")
    lengths = np.array([len(x) for x in ids])
    padded = [emb.collate([ids[i] for i in b], [pos[i] for i in b])
              for b in emb._batches(lengths, np.argsort(-lengths, kind="stable"))]
    with torch.inference_mode():
        for _pass in range(2):  # the first meets the shapes
            _sync(dev)
            t0 = time.perf_counter()
            for input_ids, attn, position_ids, _pmask in padded:
                emb._forward(input_ids, attn, position_ids)
            _sync(dev)
            t_fwd = time.perf_counter() - t0
    forward_only = {"documents": most, "seconds": t_fwd, "documents_per_s": most / t_fwd,
                    "forward_tflops": float(_forward_flops_per_token(config, lengths.mean()) * lengths.sum() / t_fwd / 1e12)}
    print(json.dumps(forward_only), flush=True)
    with tempfile.TemporaryDirectory() as tmp:  # the path an index build takes: parts written as encoded
        from alignir.encoders.cache import EmbeddingCache

        emb = PromptEOLEmbedder(loaded, progress=False, max_length=doc_tokens + 64)
        _sync(dev)
        t0 = time.perf_counter()
        EmbeddingCache(tmp).encode_cached(emb, docs[:most], "document", progress=False)
        _sync(dev)
        t_cache = time.perf_counter() - t0
    cached = {"documents": most, "seconds": t_cache, "documents_per_s": most / t_cache}
    print(json.dumps(cached), flush=True)
    qemb = PromptEOLEmbedder(loaded, progress=False, max_length=128)
    qtexts = [QUERIES[i % len(QUERIES)] + f" {i}" for i in range(n_queries + 5)]
    lat = []
    for i, q in enumerate(qtexts):
        _sync(dev)
        t0 = time.perf_counter()
        h = qemb.encode_queries([q])
        sparsifier.queries(h, qemb.surface_token_ids([q]))
        _sync(dev)
        if i >= 5:
            lat.append((time.perf_counter() - t0) * 1000)
    lat.sort()
    return {"architecture": "LlamaForCausalLM " + json.dumps({k: getattr(config, k) for k in (
                "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                "num_key_value_heads", "vocab_size")}),
            "weights": "random (torch.manual_seed(0))", "dtype": str(dtype).replace("torch.", ""),
            "tokenizer": "SmolLM2-135M-Instruct" if tokenizer_dir else "tiny byte-level BPE",
            "doc_text_tokens": doc_tokens, "documents": rows, "through_embedding_cache": cached,
            "forward_only": forward_only,
            "query_latency_ms": {"n": len(lat), "p50": statistics.median(lat),
                                 "p99": lat[min(len(lat) - 1, int(0.99 * len(lat)))], "mean": statistics.fmean(lat)}}


def _top_kernels(prof, n: int = 15) -> list[dict]:
    """The ``n`` operations that took the most device time in a torch.profiler run."""
    rows = []
    for e in prof.key_averages():
        t = getattr(e, "self_device_time_total", None)
        if t is None:
            t = getattr(e, "self_cuda_time_total", 0)
        rows.append({"name": e.key[:90], "calls": int(e.count), "device_ms": float(t) / 1000})
    rows.sort(key=lambda r: -r["device_ms"])
    total = sum(r["device_ms"] for r in rows)
    return [{**r, "share": r["device_ms"] / max(total, 1e-9)} for r in rows[:n]]


def _tokenize_diagnosis(emb, docs: list[str]) -> dict:
    """Why tokenizing runs at the rate it does in this process: the settings the Rust tokenizer
    sees, the backend's own batch rate here, and ``prepare`` split over threads (the backend
    releases the GIL) against the same in a fresh process."""
    import subprocess
    from concurrent.futures import ThreadPoolExecutor

    from alignir.encoders.fast_tokenize import encode_batch

    tok = emb.tokenizer
    out: dict = {"TOKENIZERS_PARALLELISM": os.environ.get("TOKENIZERS_PARALLELISM"),
                 "cpus_usable": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
                 "torch_threads": torch.get_num_threads()}
    for offsets in (False, True):
        t0 = time.perf_counter()
        encode_batch(tok, docs, add_special_tokens=False, offsets=offsets)
        out[f"backend_texts_per_s_offsets_{offsets}"] = len(docs) / (time.perf_counter() - t0)
    for threads in (4, 16):
        chunks = [docs[i::threads] for i in range(threads)]
        t0 = time.perf_counter()
        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(lambda c: emb.prepare(c, "document"), chunks))
        out[f"prepare_documents_per_s_{threads}_threads"] = len(docs) / (time.perf_counter() - t0)
    name_or_path = getattr(tok, "name_or_path", None)
    if name_or_path and Path(name_or_path).is_dir():
        code = ("import json, sys, time; from transformers import AutoTokenizer; "
                "docs = json.load(sys.stdin); tok = AutoTokenizer.from_pretrained(sys.argv[1]); "
                "be = tok._tokenizer; t = time.perf_counter(); be.encode_batch(docs, add_special_tokens=False); "
                "print(len(docs) / (time.perf_counter() - t))")
        try:
            res = subprocess.run([sys.executable, "-c", code, name_or_path], input=json.dumps(docs),
                                 capture_output=True, text=True, timeout=120)
            out["fresh_process_backend_texts_per_s"] = float(res.stdout.strip().splitlines()[-1])
        except Exception as e:  # a diagnosis, not a result
            out["fresh_process_backend_texts_per_s"] = f"{type(e).__name__}: {e}"
    print(json.dumps({"tokenize_diagnosis": out}), flush=True)
    return out


def bench_forward_variants(device: str, tokenizer_dir: str | None, corpus: str | None, doc_tokens: int,
                           n: int, batch: int, layers: int | None, compiled: bool = True) -> dict:
    """Where the forward's time goes at one batch size: tokenizing alone, the eager forward with
    the default and the eager attention, a profile of its kernels, and the forward through
    ``torch.compile`` (the embedder's ``compile=True``), each over the same padded batches."""
    from alignir.encoders.embedders.prompteol import PromptEOLEmbedder
    from alignir.encoders.pooling import pool

    dev = torch.device(device)
    dtype = torch.bfloat16 if dev.type == "cuda" else torch.float32
    loaded, config = _smollm2_loaded(device, dtype, tokenizer_dir, layers)
    docs = _docs_of_tokens(loaded.tokenizer, corpus, n, doc_tokens)
    emb = PromptEOLEmbedder(loaded, progress=False, max_length=doc_tokens + 64, max_batch_size=batch,
                            batch_tokens=batch * (doc_tokens + 64))
    t0 = time.perf_counter()
    ids, pos, _empty, _ = emb.prepare(docs, "document")
    t_tok = time.perf_counter() - t0
    lengths = np.array([len(x) for x in ids])
    padded = [emb.collate([ids[i] for i in b], [pos[i] for i in b])
              for b in emb._batches(lengths, np.argsort(-lengths, kind="stable"))]
    padded = [tuple(t.to(dev) for t in p) for p in padded]
    flops = _forward_flops_per_token(config, lengths.mean()) * lengths.sum()

    def run(fn) -> tuple[float, float, torch.Tensor]:
        times = []
        with torch.inference_mode():
            for _pass in range(2):  # the first meets the shapes (and compiles)
                _sync(dev)
                t0 = time.perf_counter()
                pooled = [pool("last", (o.last_hidden_state if hasattr(o, "last_hidden_state") else o[0]), a, m)
                          for input_ids, a, position_ids, m in padded
                          for o in [fn(input_ids=input_ids, attention_mask=a, position_ids=position_ids, use_cache=False)]]
                _sync(dev)
                times.append(time.perf_counter() - t0)
        return times[0], times[1], torch.cat(pooled).float()

    def row(first: float, second: float) -> dict:
        return {"seconds_first_pass": first, "seconds": second, "documents_per_s": n / second,
                "forward_tflops": flops / second / 1e12}

    out: dict = {"documents": n, "batch": batch, "tokens_per_document": float(lengths.mean()),
                 "tokenize_seconds": t_tok, "tokenize_documents_per_s": n / t_tok,
                 "tokenize_diagnosis": _tokenize_diagnosis(emb, docs),
                 "attn_implementation": getattr(config, "_attn_implementation", None)}
    first, second, ref = run(emb._backbone)
    out["eager_default_attention"] = row(first, second)
    print(json.dumps(out), flush=True)
    try:
        from torch.profiler import ProfilerActivity, profile

        acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if dev.type == "cuda" else [])
        with profile(activities=acts) as prof, torch.inference_mode():
            for input_ids, a, position_ids, _m in padded[:4]:
                emb._backbone(input_ids=input_ids, attention_mask=a, position_ids=position_ids, use_cache=False)
            _sync(dev)
        out["eager_top_kernels"] = _top_kernels(prof)
    except Exception as e:  # the profiler is a diagnosis, not a result
        out["eager_top_kernels"] = {"error": f"{type(e).__name__}: {e}"}
    setter = getattr(loaded.model, "set_attn_implementation", None)
    default_attn = out["attn_implementation"]
    if callable(setter) and default_attn != "eager":
        try:
            setter("eager")
            first, second, v = run(emb._backbone)
            out["eager_eager_attention"] = {**row(first, second), "min_cosine_to_default": float(_cos_rows(
                v.cpu().numpy(), ref.cpu().numpy()).min())}
        except Exception as e:
            out["eager_eager_attention"] = {"error": f"{type(e).__name__}: {e}"}
        finally:
            setter(default_attn)
    if not compiled:
        return out
    try:
        first, second, v = run(torch.compile(emb._backbone, dynamic=True))
        out["compiled"] = {**row(first, second), "compile_and_first_pass_seconds": first,
                           "min_cosine_to_eager": float(_cos_rows(v.cpu().numpy(), ref.cpu().numpy()).min())}
    except Exception as e:
        import traceback

        out["compiled"] = {"error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()[-2000:]}
    print(json.dumps({k: v for k, v in out.items() if k != "eager_top_kernels"}), flush=True)
    return out


def bench_training(device: str, tokenizer_dir: str | None, corpus: str | None, batch_sizes: list[int],
                   steps: int, layers: int | None) -> list[dict]:
    """Step 3: LoRA InfoNCE training steps/s through the product's trainer."""
    from alignir.encoders.train.trainer import TrainConfig, train

    dev = torch.device(device)
    dtype = "bf16" if dev.type == "cuda" else None
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for bs in batch_sizes:
            loaded, _config = _smollm2_loaded(device, torch.bfloat16 if dev.type == "cuda" else torch.float32,
                                              tokenizer_dir, layers)
            texts = _docs_of_tokens(loaded.tokenizer, corpus, 3 * bs * 2, 80)
            data = Path(tmp) / f"triples-{bs}.jsonl"
            with open(data, "w") as fh:
                for i in range(0, len(texts) - 2, 3):
                    fh.write(json.dumps({"query": texts[i][:200], "positive": texts[i + 1],
                                         "negatives": [texts[i + 2]]}) + "\n")
            times = {}
            for n in (2, 2 + steps):
                cfg = TrainConfig(method="infonce", stage="contrastive", data=str(data), out=f"{tmp}/run-{bs}-{n}",
                                  steps=n, batch_size=bs, lr=1e-4, lora_r=16, lora_alpha=32, max_length=96,
                                  progress=False, seed=0, device=device, dtype=dtype, save_every=10 ** 6,
                                  eval_examples=0)
                _sync(dev)
                t0 = time.perf_counter()
                train(cfg, loaded=loaded)
                _sync(dev)
                times[n] = time.perf_counter() - t0
            per_step = (times[2 + steps] - times[2]) / steps
            rows.append({"batch_size": bs, "max_length": 96, "lora_r": 16, "dtype": dtype or "float32",
                         "steps_timed": steps, "seconds_per_step": per_step, "steps_per_s": 1 / per_step,
                         "examples_per_s": bs / per_step})
            print(json.dumps(rows[-1]), flush=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--tokenizer", default=None, help="a tokenizer folder (SmolLM2's); default: the tiny one")
    ap.add_argument("--corpus", default=None, help="a BEIR corpus.jsonl for real text")
    ap.add_argument("--doc-tokens", type=int, default=256)
    ap.add_argument("--quick", action="store_true", help="small sizes (the CPU self-test)")
    ap.add_argument("--no-compile", action="store_true",
                    help="skip the torch.compile rows (their compilation takes about 100 s on an H100)")
    args = ap.parse_args()
    dev = torch.device(args.device)
    quick = args.quick or dev.type != "cuda"
    t_start = time.perf_counter()
    result: dict = {"device": args.device, "started": time.strftime("%Y-%m-%d %H:%M:%S"),
                    "command": "python " + " ".join(sys.argv), "torch": torch.__version__,
                    "python": platform.python_version()}
    try:
        import transformers

        result["transformers"] = transformers.__version__
    except ImportError:
        pass
    if dev.type == "cuda":
        p = torch.cuda.get_device_properties(dev)
        result["gpu"] = {"name": p.name, "memory_gib": p.total_memory / 2 ** 30, "multiprocessors": p.multi_processor_count}
    try:
        import faiss

        result["faiss_gpus"] = int(faiss.get_num_gpus())
    except ImportError:
        result["faiss_gpus"] = None  # faiss not installed there: the dense index stays on the CPU side
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)

    def step(name: str, fn) -> None:
        """Run one step; its result (or its error) is written at once, so a later failure keeps it."""
        try:
            result[name] = fn()
        except Exception as e:  # a step that fails on that machine is recorded, the others still run
            import traceback

            result[name] = {"error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()[-3000:]}
        result["seconds"] = time.perf_counter() - t_start
        out.write_text(json.dumps(result, indent=1) + "\n")
        print(name, json.dumps(result[name])[:2000], flush=True)

    layers = 2 if quick else None
    batches = [1, 4] if quick else [1, 32, 128]
    n_docs = {1: 8, 4: 16} if quick else {1: 64, 32: 1024, 128: 4096}
    step("tiny_model", lambda: check_tiny(args.device, args.corpus))
    step("matmul_tflops", lambda: matmul_tflops(dev, 512 if quick else 8192, 3 if quick else 20))
    step("encoder", lambda: bench_encoder(args.device, args.tokenizer, args.corpus, 32 if quick else args.doc_tokens,
                                          batches, n_docs, layers, 10 if quick else 200, not args.no_compile))
    step("forward_variants", lambda: bench_forward_variants(args.device, args.tokenizer, args.corpus,
                                                            32 if quick else args.doc_tokens, 16 if quick else 2048,
                                                            4 if quick else 128, layers, not args.no_compile))
    if isinstance(result.get("matmul_tflops"), float) and "documents" in result["encoder"]:
        best = max(r["forward_tflops"] for r in result["encoder"]["documents"])
        result["encoder"]["best_forward_share_of_matmul"] = best / result["matmul_tflops"]
    step("training", lambda: bench_training(args.device, args.tokenizer, args.corpus, [2] if quick else [8, 32],
                                            2 if quick else 20, layers))
    print(f"wrote {args.out} in {result['seconds']:.0f} s")


if __name__ == "__main__":
    main()
