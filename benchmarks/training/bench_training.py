"""CPU-size benchmark of the trained embedders: train each method briefly with LoRA on
SmolLM2-135M (SciFact train pairs / SciFact corpus text), then nDCG@10 on a test collection,
dense (cosine) and aligned-token sparse (“A Text is Worth Several Tokens” eq.15/16 via encoders.aligned), against the
untrained PromptEOL embedder in the same run.

    nice -n 10 .venv/bin/python -m benchmarks.training.bench_training --eval ../shared/datasets/adi \
        --train ../shared/datasets/scifact --out benchmarks/results/training.json
    # SciFact test on every judged document + random distractors (1,000 docs, beir_sample.py):
    .venv/bin/python -m benchmarks.training.bench_training --eval ../shared/datasets/scifact \
        --eval-sample-docs 1000 --eval-max-length 128

Runs are keyed ``<eval collection>/<run>`` in the JSON and each finished one is written at
once, so a partial run still leaves results and other collections' runs are kept.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

from benchmarks.common import DATASETS

ROOT = Path(__file__).resolve().parents[2]


def ndcg10(qrels: dict, scores: np.ndarray, qids: list[str], dids: list[str]) -> float:
    import pytrec_eval

    run = {}
    for i, q in enumerate(qids):
        top = np.argsort(-scores[i])[:100]
        run[q] = {dids[j]: float(scores[i, j]) for j in top}
    ev = pytrec_eval.RelevanceEvaluator({q: qrels[q] for q in qids}, {"ndcg_cut.10"})
    res = ev.evaluate(run)
    return float(np.mean([res[q]["ndcg_cut_10"] for q in qids]))


def evaluate(emb, loaded, coll, K: int, M: int, DQ=None) -> dict:
    """nDCG@10 dense + sparse; ``DQ`` = (D, Q, seconds) precomputed vectors, else encoded with ``emb``."""
    from alignir.encoders.aligned import doc_vectors, query_vectors

    corpus, queries, qrels = coll
    qids = [q for q in qrels if q in queries]
    dids = list(corpus)
    if DQ is None:
        t0 = time.perf_counter()
        D = emb.encode_documents([corpus[d] for d in dids])
        Q = emb.encode_queries([queries[q] for q in qids])
        enc_s = time.perf_counter() - t0
    else:
        D, Q, enc_s = DQ
    Dn = D / np.linalg.norm(D, axis=1, keepdims=True).clip(1e-12)
    Qn = Q / np.linalg.norm(Q, axis=1, keepdims=True).clip(1e-12)
    dense = ndcg10(qrels, Qn @ Dn.T, qids, dids)
    W = emb.lm_head
    dv = doc_vectors(D, W, K, mask_ids=loaded.special_ids)
    qv = query_vectors(Q, emb.surface_token_ids([queries[q] for q in qids]), W, M, mask_ids=loaded.special_ids)
    sparse = ndcg10(qrels, (qv @ dv.T).toarray(), qids, dids)
    return {"ndcg@10_dense": round(dense, 4), "ndcg@10_sparse": round(sparse, 4), "encode_seconds": round(enc_s, 1)}


def gircse_multi_k(loaded, adapter, Ks, coll, max_length):
    """Encode once with K=max(Ks): the first k generated states do not depend on K (causal),
    so z_k = mean(G[:, :k]) for every k in Ks comes from one generation (Alg.1, eq.4)."""
    from alignir.encoders.embedders.gircse import GircseEmbedder

    class Multi(GircseEmbedder):
        @property
        def dim(self):
            return int(self.lm_head.shape[1]) * len(Ks)

        def embed_batch(self, texts, role):
            from alignir.encoders.embedders.gircse import generate_soft_tokens, gircse_input_ids
            from alignir.encoders.templates import resolve_instruction
            from alignir.encoders.embedders.generative import left_pad, pad_id

            instr = resolve_instruction(self.instruction) if role == "query" else None
            rows = [gircse_input_ids(self.tokenizer, t, instr, self.max_length) for t in texts]
            G = generate_soft_tokens(self.model, *left_pad(rows, pad_id(self.tokenizer)), max(Ks))
            return torch.cat([G[:, :k].float().mean(1) for k in Ks], dim=1)

    emb = Multi(loaded, adapter=adapter, K=max(Ks), max_length=max_length)
    corpus, queries, qrels = coll
    qids = [q for q in qrels if q in queries]
    t0 = time.perf_counter()
    D = emb.encode_documents([corpus[d] for d in corpus])
    Q = emb.encode_queries([queries[q] for q in qids])
    sec = time.perf_counter() - t0
    d = D.shape[1] // len(Ks)
    return {k: (D[:, i * d:(i + 1) * d], Q[:, i * d:(i + 1) * d], sec) for i, k in enumerate(Ks)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--train", default=str(DATASETS / "scifact"))
    ap.add_argument("--eval", default=str(DATASETS / "adi"))
    ap.add_argument("--eval-sample-docs", type=int, default=0,
                    help="evaluate on every judged test document plus random distractors up to this many "
                         "documents (0: the whole corpus)")
    ap.add_argument("--eval-max-length", type=int, default=None,
                    help="token budget of the evaluation encodes (default: --max-length)")
    ap.add_argument("--out", default=str(ROOT / "benchmarks/results/training.json"))
    ap.add_argument("--workdir", default="/tmp/alignir_bench_training")
    ap.add_argument("--steps", type=int, default=20, help="optimizer steps per stage")
    ap.add_argument("--batch-size", type=int, default=4)
    ap.add_argument("--max-length", type=int, default=96)
    ap.add_argument("--target-length", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--K", type=int, default=256, help="aligned tokens per document (eq.15)")
    ap.add_argument("--M", type=int, default=50, help="query expansion tokens (eq.16)")
    ap.add_argument("--only", default="", help="comma list of runs to do (default all)")
    ap.add_argument("--lr", action="append", default=[], metavar="RUN=LR",
                    help="learning rate of one run (repeatable), e.g. gircse=1e-5; default: the plan's")
    ap.add_argument("--eval-examples", type=int, default=16,
                    help="training examples held out for the held-out training loss (before / every / after)")
    ap.add_argument("--eval-every", type=int, default=0, help="held-out loss every N steps (0: before and after)")
    ap.add_argument("--grad-accum", type=int, default=1)
    ap.add_argument("--save-every", type=int, default=10, help="checkpoint every N steps (a rerun resumes)")
    ap.add_argument("--suffix", default="", help="appended to the result keys (e.g. -lr2e-5 for a variant)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    from alignir.encoders.embedders import get_embedder
    from alignir.encoders.models import load_model
    from alignir.encoders.train.data import _beir
    from alignir.encoders.train.infonce import InfoNCEEmbedder
    from alignir.encoders.train.trainer import TrainConfig, train

    loaded = load_model(args.model, device="cpu")
    wd = Path(args.workdir)
    eval_dir, eval_name = Path(args.eval), Path(args.eval).name
    if args.eval_sample_docs:
        from benchmarks.quality.beir_sample import write_sample

        eval_name = f"{eval_name}-sample{args.eval_sample_docs}"
        eval_dir = write_sample(eval_dir, wd / eval_name, args.eval_sample_docs)
    coll = _beir(eval_dir, "test")
    EL = args.eval_max_length or args.max_length
    out_path = Path(args.out)
    results = json.loads(out_path.read_text()) if out_path.exists() else {}
    results.setdefault("runs", {})
    results.setdefault("setups", {})
    cmd_base = ".venv/bin/python -m benchmarks.training.bench_training " + " ".join(sys.argv[1:])
    results["setups"][eval_name] = {
        "model": args.model, "train_data": f"{Path(args.train).name} train split (pairs: BM25 hard negatives) / corpus text",
        "eval": f"{eval_name} test ({len(coll[0])} docs, {len([q for q in coll[2] if q in coll[1]])} queries)",
        "dense": "cosine", "sparse": f"aligned tokens, doc top-K={args.K} raw logits, query surface + top-M={args.M} binary",
        "steps_per_stage": args.steps, "batch_size": args.batch_size, "max_length": args.max_length,
        "target_length": args.target_length, "eval_max_length": EL, "threads": args.threads, "command": cmd_base,
    }
    only = set(filter(None, args.only.split(",")))

    def save() -> None:  # merge with runs written meanwhile by parallel invocations (--only)
        out_path.parent.mkdir(parents=True, exist_ok=True)
        if out_path.exists():
            disk = json.loads(out_path.read_text())
            results["runs"] = {**disk.get("runs", {}), **results["runs"]}
            results["setups"] = {**disk.get("setups", {}), **results["setups"]}
        tmp = out_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(results, indent=1))
        tmp.replace(out_path)

    def key(run: str) -> str:
        return f"{eval_name}/{run}"

    base = results["runs"].get(key("prompteol-untrained"), {}).get("ndcg@10_dense")
    if base is None or "prompteol-untrained" in only:
        r = evaluate(get_embedder("prompteol", loaded, max_length=EL, progress=False), loaded, coll, args.K, args.M)
        results["runs"][key("prompteol-untrained")] = {"method": "prompteol", "model": args.model, "steps": 0, "train_seconds": 0,
                                                  "dataset": eval_name, **r, "command": cmd_base}
        base = r["ndcg@10_dense"]
        save()
        print("baseline", r, flush=True)

    lr_override = {k: float(v) for k, v in (x.split("=", 1) for x in args.lr)}

    def run_stage(name, method, stage, data, lr, init=None, hp=None, steps=None):
        cfg = TrainConfig(method=method, stage=stage, data=data, out=str(wd / name), model=args.model,
                          steps=steps or args.steps, batch_size=args.batch_size, grad_accum=args.grad_accum, lr=lr,
                          max_length=args.max_length, target_length=args.target_length,
                          init_adapter=str(wd / init) if init else None, hp=hp or {}, progress=False,
                          resume=True, save_every=args.save_every, eval_examples=args.eval_examples,
                          eval_every=args.eval_every)
        return train(cfg, loaded=loaded), cfg

    def record(name, method, summ, emb, extra_cmd, extra=None, r=None):
        r = r or evaluate(emb, loaded, coll, args.K, args.M)
        log = [json.loads(x) for x in (Path(summ["out"]) / "loss_log.jsonl").read_text().splitlines()]
        ev_file = Path(summ["out"]) / "eval_log.jsonl"
        ev = [json.loads(x) for x in ev_file.read_text().splitlines()] if ev_file.is_file() else []
        w = max(1, len(log) // 10)  # one batch's loss is noise: also the mean of the first / last 10% of steps
        losses = [x["loss"] for x in log]
        results["runs"][key(name + args.suffix)] = {
            "method": method, "model": args.model, "steps": summ["steps"], "train_seconds": round(summ["train_seconds"], 1),
            "dataset": eval_name, **r, "baseline_ndcg@10_dense": base,
            "loss_first": round(losses[0], 4), "loss_last": round(losses[-1], 4),
            "loss_first10pct_mean": round(float(np.mean(losses[:w])), 4),
            "loss_last10pct_mean": round(float(np.mean(losses[-w:])), 4),
            "heldout_loss": {str(e["step"]): round(e["loss"], 4) for e in ev},
            "heldout_examples": args.eval_examples,
            "lr": summ.get("lr"), "batch_size": args.batch_size, "grad_accum": args.grad_accum,
            "command": cmd_base, "equivalent_train_command": extra_cmd, **(extra or {}),
        }
        save()
        print(name, results["runs"][key(name + args.suffix)], flush=True)

    def cli(method, stage, data, name, lr, init=None, hp=None):
        s = (f"alignir train {method} --stage {stage} --data {data} --out {wd / name} --steps {args.steps} "
             f"--batch-size {args.batch_size} --lr {lr} --max-length {args.max_length} --target-length {args.target_length} "
             f"--eval-examples {args.eval_examples} --save-every {args.save_every}")
        if args.grad_accum > 1:
            s += f" --grad-accum {args.grad_accum}"
        if args.eval_every:
            s += f" --eval-every {args.eval_every}"
        if init:
            s += f" --init-adapter {wd / init}"
        for k, v in (hp or {}).items():
            s += f" --set {k}={v}"
        return s

    T = args.train
    plan = [  # priority order: a partial run keeps the first ones
        ("infonce", "infonce", "contrastive", T, 1e-4, None, None),
        ("autoregembed-ic", "autoregembed", "ic", T, 1e-4, None, None),
        ("autoregembed-cda", "autoregembed", "cda", T, 2e-5, "autoregembed-ic", None),
        ("gircse", "gircse", "icr", T, 1e-4, None, None),
        ("llm2comp-ctkd", "llm2comp", "ctkd", T, 1e-4, None, None),
        ("llm2comp-nll", "llm2comp", "nll", T, 1e-4, None, None),
        ("llm2comp-rc", "llm2comp", "rc", T, 1e-4, None, None),
        ("llm2comp-ctkd-scl", "llm2comp", "scl", T, 1e-4, "llm2comp-ctkd", None),
        ("llm2comp-ctkd-ucl", "llm2comp", "ucl", T, 3e-5, "llm2comp-ctkd", None),
    ]
    if "gircse-untrained" in only:  # test-time K without training (direction-of-effect reference)
        ref = get_embedder("gircse", loaded, K=1, max_length=EL)
        ks = {f"K={K}": evaluate(ref, loaded, coll, args.K, args.M, DQ)
              for K, DQ in gircse_multi_k(loaded, None, (1, 5, 20), coll, EL).items()}
        results["runs"][key("gircse-untrained")] = {"method": "gircse", "model": args.model, "steps": 0, "train_seconds": 0,
                                               "dataset": eval_name, **ks["K=20"], "baseline_ndcg@10_dense": base,
                                               "test_time_K": ks, "command": cmd_base}
        save()
        print("gircse-untrained", ks, flush=True)
    for method in ("autoregembed", "llm2comp"):  # untrained soft tokens + no adapter: the starting point
        name = f"{method}-untrained"
        if name in only:
            r = evaluate(get_embedder(method, loaded, max_length=EL), loaded, coll, args.K, args.M)
            results["runs"][key(name)] = {"method": method, "model": args.model, "steps": 0, "train_seconds": 0,
                                     "dataset": eval_name, **r, "baseline_ndcg@10_dense": base, "command": cmd_base}
            save()
            print(name, r, flush=True)
    for name, method, stage, data, lr, init, hp in plan:
        if only and name not in only:
            continue
        lr = lr_override.get(name, lr)
        summ, _ = run_stage(name, method, stage, data, lr, init, hp)
        summ["lr"] = lr
        adir = str(wd / name)
        if method == "infonce":
            emb = InfoNCEEmbedder(loaded, adapter=adir, max_length=EL, progress=False)
            record(name, method, summ, emb, cli(method, stage, data, name, lr, init, hp))
        elif method == "gircse":
            extra = {}
            ref = get_embedder("gircse", loaded, K=1, max_length=EL)  # for lm_head / surface ids only
            for K, DQ in gircse_multi_k(loaded, adir, (1, 5, 20), coll, EL).items():
                extra[f"K={K}"] = evaluate(ref, loaded, coll, args.K, args.M, DQ)
            record(name, method, summ, None, cli(method, stage, data, name, lr, init, hp), {"test_time_K": extra},
                   r=extra["K=20"])
        else:
            emb = get_embedder(method, loaded, adapter=adir, max_length=EL)
            record(name, method, summ, emb, cli(method, stage, data, name, lr, init, hp))


if __name__ == "__main__":
    main()
