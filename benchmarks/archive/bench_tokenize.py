"""Tokenizing documents for the encoder: ``PromptEmbedder.prepare`` through the Rust backend
(encoders/fast_tokenize.py) against the same two passes through the transformers tokenizer call
(what ``prepare`` did before: the text alone with offsets, then the rendered prompt with offsets,
every token turned into Python lists by transformers).

Both produce the same ids and pooled positions (checked here on every document); the ratio is
``speedup``. Rounds alternate between the two, and each figure is the median of its rounds, so
the machine's moods fall on both. Run it with nothing else on the machine; ``load`` records the
load average at the start.

    .venv/bin/python -m benchmarks.archive.bench_tokenize --corpus ../shared/datasets/med/corpus.jsonl \\
        --out benchmarks/results/tokenize.json
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path


def transformers_prepare(emb, texts: list[str], role: str) -> tuple[list[list[int]], list[list[int]]]:
    """``prepare``'s result computed with transformers tokenizer calls: the texts alone with
    offsets (to cut the long ones), then the rendered prompts with offsets, again for the
    prompts that a merge at the template boundary made too long."""
    tok = emb.tokenizer
    budget = emb.text_budget(role)
    enc = tok(texts, add_special_tokens=False, return_offsets_mapping=True)
    cut = [t[: offs[budget - 1][1]] if len(ids) > budget else t
           for t, ids, offs in zip(texts, enc["input_ids"], enc["offset_mapping"])]
    ids_out: list[list[int]] = [[] for _ in texts]
    pos_out: list[list[int]] = [[] for _ in texts]
    pending = list(range(len(texts)))
    while pending:
        rendered = [emb._render(cut[i], role) for i in pending]
        enc = tok([r[0] for r in rendered], add_special_tokens=True, return_offsets_mapping=True)
        retry = []
        for i, (_p, (s, e)), ids, offs in zip(pending, rendered, enc["input_ids"], enc["offset_mapping"]):
            if len(ids) > emb.max_length:
                cut[i] = emb._shorten(cut[i], (len(ids) - emb.max_length) * emb.template.n_slots)
                retry.append(i)
                continue
            ids_out[i] = list(ids)
            pos_out[i] = [j for j, (a, b) in enumerate(offs) if b > a and a < e and b > s]
        pending = retry
    return ids_out, pos_out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", required=True, help="a BEIR corpus.jsonl")
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--documents", type=int, default=1024)
    ap.add_argument("--max-length", type=int, default=512)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--parallelism", default="false,true",
                    help="TOKENIZERS_PARALLELISM values to run (the tokenizer's own threads: alignir turns them "
                         "off on a CPU and on beside a GPU)")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()

    from alignir.encoders.embedders.prompteol import PromptEOLEmbedder
    from alignir.encoders.models import load_model

    loaded = load_model(args.model, device="cpu")
    with open(args.corpus) as fh:
        rows = [json.loads(line) for _, line in zip(range(args.documents), fh)]
    texts = [(r.get("title", "") + " " + r["text"]).strip() for r in rows]
    emb = PromptEOLEmbedder(loaded, progress=False, max_length=args.max_length)
    ids, pos, _, _ = emb.prepare(texts, "document")
    want_ids, want_pos = transformers_prepare(emb, texts, "document")
    if ids != want_ids or pos != want_pos:
        sys.exit("prepare and the transformers call disagree: not comparable")
    load = os.getloadavg()[0]
    runs = []
    for parallelism in args.parallelism.split(","):
        os.environ["TOKENIZERS_PARALLELISM"] = parallelism
        times: dict[str, list[float]] = {"prepare": [], "transformers_call": []}
        for _ in range(args.rounds):
            for name, fn in (("prepare", lambda: emb.prepare(texts, "document")),
                             ("transformers_call", lambda: transformers_prepare(emb, texts, "document"))):
                t0 = time.perf_counter()
                fn()
                times[name].append(time.perf_counter() - t0)
        med = {k: statistics.median(v) for k, v in times.items()}
        runs.append({"TOKENIZERS_PARALLELISM": parallelism,
                     "documents_per_s": {k: len(texts) / v for k, v in med.items()},
                     "speedup": med["transformers_call"] / med["prepare"]})
    result = {
        "command": "python " + " ".join([Path(sys.argv[0]).as_posix(), *sys.argv[1:]]),
        "machine": f"{platform.machine()}, {os.cpu_count()} cpus, load average {load:.2f} at the start",
        "model": args.model, "documents": len(texts), "max_length": args.max_length,
        "tokens_per_document": sum(map(len, ids)) / len(ids), "rounds": args.rounds,
        "same_ids_and_positions": True, "runs": runs,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
