"""How hard each InfoNCE loss term pulls on the embeddings: gradient norms per term, per adapter.

A term's weight (``--set sparse_distill=w``, ``--set sparse=w``) only means something beside the
size of its gradient: the aligned-token scores are dot products over the vocabulary projection
(“A Text is Worth Several Tokens” eq.15-16), hundreds apart within a batch, and their gradient
reaches the same vectors h as the dense InfoNCE (AutoRegEmbed eq.1). For batches of training pairs
(a query, its positive, BM25 hard negatives; the trainer's layout and candidates) this embeds the
texts with an adapter, then reports ‖∂term/∂h‖ over the batch's queries and documents for

- ``infonce``: losses.info_nce at τ = 0.05 (the trainer's default);
- ``sparse_distill@10`` / ``sparse_distill@auto``: aligned_loss.sparse_distill_kl at the fixed
  temperature 10 and at the matched one (aligned_loss.matched_temperature);
- ``sparse@10`` / ``sparse@auto``: aligned_loss.sparse_info_nce likewise;
- ``flops_d`` / ``flops_q``: aligned_loss.flops_penalty of the documents' / queries' weights.

Each row is the mean over ``--batches`` batches, with ``ratio_to_infonce`` (queries and documents
together). The teacher's distillation term is left out: it needs the teacher's vectors.

    python -m benchmarks.archive.loss_gradients --data ../shared/datasets/scifact --adapter v3=builtin:smollm2-135m-alignir-v3

Rows replace those of the same (dataset, adapter, term) in benchmarks/results/loss_gradients.json.
"""
from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from benchmarks.common import adapter_encoders
from benchmarks.common import replace_rows

RESULTS = Path(__file__).resolve().parents[1] / "results" / "loss_gradients.json"
TAU = 0.05  # the InfoNCE trainer's default temperature


def term_losses(lm_head: torch.Tensor, surface: list, special_ids, pos: torch.Tensor,
                cand: torch.Tensor | None) -> dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]]:
    """Each term as a function of the batch's query and document embeddings (q [B, d], d [M, d])."""
    from alignir.encoders.train.aligned_loss import (aligned_scores, aligned_weights, flops_penalty,
                                                     matched_temperature, sparse_distill_kl, sparse_info_nce)
    from alignir.encoders.train.losses import cosine_scores, info_nce

    def sparse_term(kind: str, tau: str) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
        def loss(q: torch.Tensor, d: torch.Tensor) -> torch.Tensor:
            scores = aligned_scores(q, d, lm_head, surface, special_ids)
            dense = cosine_scores(q, d).detach() / TAU
            t = matched_temperature(scores, dense, cand) if tau == "auto" else float(tau)
            if kind == "sparse":
                return sparse_info_nce(scores, pos, t, cand)
            return sparse_distill_kl(dense, scores, t, cand)
        return loss

    terms = {"infonce": lambda q, d: info_nce(q, d, pos, TAU, cand)}
    for kind in ("sparse_distill", "sparse"):
        for tau in ("10", "auto"):
            terms[f"{kind}@{tau}"] = sparse_term(kind, tau)
    terms["flops_d"] = lambda q, d: flops_penalty(aligned_weights(q, d, lm_head, surface, special_ids)[1])
    terms["flops_q"] = lambda q, d: flops_penalty(aligned_weights(q, d, lm_head, surface, special_ids)[0])
    return terms


def gradient_norms(fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor], hq: torch.Tensor,
                   hd: torch.Tensor) -> tuple[float, float]:
    """(‖∂fn/∂q‖, ‖∂fn/∂d‖), Frobenius norms over the batch."""
    q, d = hq.detach().clone().requires_grad_(True), hd.detach().clone().requires_grad_(True)
    gq, gd = torch.autograd.grad(fn(q, d), (q, d), allow_unused=True)
    return (0.0 if gq is None else float(gq.norm())), (0.0 if gd is None else float(gd.norm()))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", required=True, help="a BEIR folder with a train split")
    ap.add_argument("--adapter", action="append", required=True, metavar="NAME=ADAPTER",
                    help="an InfoNCE adapter of --model: a folder or builtin:NAME")
    ap.add_argument("--model", default="smollm2-135m", help="the base model the adapters were trained on")
    ap.add_argument("--split", default="train")
    ap.add_argument("--batches", type=int, default=4)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--negatives", type=int, default=1)
    ap.add_argument("--max-length", type=int, default=128)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args(argv)

    from alignir.encoders.train.base import in_batch_candidates, pair_texts
    from alignir.encoders.train.data import load_beir_pairs

    pairs = load_beir_pairs(args.data, args.split, n_negatives=args.negatives, seed=args.seed)
    order = np.random.default_rng(args.seed).permutation(len(pairs))
    batches = [[pairs[i] for i in order[b * args.batch_size:(b + 1) * args.batch_size]] for b in range(args.batches)]
    batches = [b for b in batches if b]
    command = "python -m benchmarks.archive.loss_gradients " + shlex.join(sys.argv[1:] if argv is None else argv)
    rows = []
    for name, adapter, enc in adapter_encoders(args.adapter, args.model, max_length=args.max_length):
        sums: dict[str, np.ndarray] = {}
        for batch in batches:
            queries, docs, pos = pair_texts(batch)
            hq = torch.from_numpy(enc.dense(queries, "query"))
            hd = torch.from_numpy(enc.dense(docs, "document"))
            terms = term_losses(enc.loaded.lm_head, enc.embedder.surface_token_ids(queries), enc.loaded.special_ids,
                                torch.tensor(pos), in_batch_candidates(batch, docs))
            for term, fn in terms.items():
                sums[term] = sums.get(term, np.zeros(2)) + np.array(gradient_norms(fn, hq, hd))
        mean = {t: v / len(batches) for t, v in sums.items()}
        base = float(np.hypot(*mean["infonce"]))
        for term, (gq, gd) in mean.items():
            row = {"dataset": Path(args.data).name, "adapter": name, "source": adapter, "term": term,
                   "grad_norm_queries": gq, "grad_norm_documents": gd,
                   "ratio_to_infonce": float(np.hypot(gq, gd)) / base if base > 0 else None,
                   "batches": len(batches), "batch_size": args.batch_size, "command": command}
            print(json.dumps({k: v for k, v in row.items() if k != "command"}), flush=True)
            rows.append(row)
    replace_rows(args.out, rows, ("dataset", "adapter", "term"), wrapped=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
