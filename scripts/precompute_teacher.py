"""Fill a teacher cache (encoders.train.teacher.CachedTeacher) with exactly the texts a training
data mix yields, so that distillation runs never wait for the teacher.

The texts are those of ``encoders.train.mix.load_mix`` for each seed (the supervised pairs of the
train split, title/crop pairs of the corpus, their mined negatives): queries read as "query",
positives and negatives as "document", as InfoNCE distillation reads them. Texts already cached
are skipped, so a killed run resumes where its last shard ended. Example (EmbeddingGemma-300M,
the texts of the shipped recipe's mix for seeds 0 and 1):

    ALIGNIR_MODELS=/work/models python scripts/precompute_teacher.py --teacher embeddinggemma-300m \\
        --cache /work/cache/teacher-embeddinggemma --data ../shared/datasets/scifact \\
        --data-mix supervised,title=2000,crop=2000 --corpus ../shared/datasets/scifact \\
        --negatives 1 --seeds 0,1 --max-length 128 --threads 1
"""
from __future__ import annotations

import argparse
import sys
import time

import torch

from alignir.encoders.train.mix import load_mix
from alignir.encoders.train.teacher import CachedTeacher, make_teacher


def mix_texts(data: str, mix: str | None, corpora: list[str] | None, negatives: int, seeds: list[int],
              split: str = "train") -> list[tuple[str, str]]:
    """(role, text) of every pair of the mix for each seed, first occurrence order, no repeats."""
    seen: dict[tuple[str, str], None] = {}
    for seed in seeds:
        pairs, _ = load_mix(data, mix, split, n_negatives=negatives, seed=seed, corpora=corpora)
        for p in pairs:
            seen.setdefault(("query", p.query), None)
            seen.setdefault(("document", p.positive), None)
            for n in p.negatives:
                seen.setdefault(("document", n), None)
    return list(seen)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--teacher", required=True)
    ap.add_argument("--cache", required=True, help="cache root (the trainer's --set teacher_cache=...)")
    ap.add_argument("--data", required=True)
    ap.add_argument("--data-mix", default=None)
    ap.add_argument("--corpus", action="append", default=None)
    ap.add_argument("--negatives", type=int, default=1)
    ap.add_argument("--seeds", default="0")
    ap.add_argument("--split", default="train")
    ap.add_argument("--max-length", type=int, default=None, help="teacher tokens (the trainer's teacher_max_length)")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--shard-size", type=int, default=256)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    todo = mix_texts(args.data, args.data_mix, args.corpus, args.negatives, seeds, args.split)
    cache = CachedTeacher(make_teacher(args.teacher, args.max_length), args.cache, shard_size=args.shard_size)
    missing = [(r, t) for r, t in todo if not cache.contains(t, r)]
    print(f"{len(todo)} texts in the mix, {len(todo) - len(missing)} cached, {len(missing)} to compute "
          f"into {cache.folder}", flush=True)
    # longest first within each role: batches of similar length pad little
    missing.sort(key=lambda rt: (rt[0], -len(rt[1])))
    t0, done = time.perf_counter(), 0
    for i in range(0, len(missing), args.batch):
        chunk = missing[i:i + args.batch]
        for role in ("query", "document"):
            texts = [t for r, t in chunk if r == role]
            if texts:
                cache.embed(texts, role)
        done += len(chunk)
        if done % (args.batch * 8) == 0 or done == len(missing):
            s = time.perf_counter() - t0
            print(f"{done}/{len(missing)} texts, {s:.0f} s, {s / done:.3f} s/text", flush=True)
    cache.flush()
    print(f"done: {len(cache)} vectors in {cache.folder}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
