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

``--seed-from-anchor DIR`` first copies in the document vectors that ``benchmarks/quality/anchors.py
--cache DIR`` already computed with the same model and max_length (an anchor reads documents as
the teacher does: the same model, prompt and cut), so only the rest is computed.
"""
from __future__ import annotations

import argparse
import sys
import time

import numpy as np
import torch

from alignir.encoders.train.mix import load_mix
from alignir.encoders.train.teacher import ST_TEACHERS, CachedTeacher, make_teacher, st_identity


class ReplayTeacher:
    """A sentence-transformers teacher's identity and prompts with its document vectors read
    from a dense anchor's embedding cache (benchmarks/quality/anchors.py ``--cache``): no model loads."""

    def __init__(self, name: str, max_length: int | None, vectors: dict[str, np.ndarray]) -> None:
        self.max_length = replay_max_length(name, max_length)  # names a sentence-transformers teacher or exits
        known = ST_TEACHERS[name]
        self.identity = st_identity(name, self.max_length)
        self.prompts = dict(known[2])
        self.vectors = vectors

    def prompt(self, role: str) -> str:
        return self.prompts[role]

    def embed(self, texts: list[str], role: str = "document") -> torch.Tensor:
        if role != "document":
            raise ValueError("an anchor's cache holds document vectors only")
        return torch.from_numpy(np.stack([self.vectors[t] for t in texts]))


def replay_max_length(name: str, max_length: int | None) -> int:
    """The teacher's token limit: ``max_length``, or the sentence-transformers teacher's own."""
    known = ST_TEACHERS.get(name)
    if known is None:
        raise SystemExit(f"--seed-from-anchor needs a sentence-transformers teacher ({', '.join(ST_TEACHERS)})")
    return known[3] if max_length is None else int(max_length)


def anchor_vectors(anchor_cache: str, name: str, max_length: int, texts: list[str]) -> dict[str, np.ndarray]:
    """The vectors of ``texts`` that a dense anchor run cached (benchmarks.quality.anchors.AnchorEmbedder's
    fingerprint: the anchor's label and max_length), by text."""
    from pathlib import Path

    from alignir.encoders.cache import EmbeddingCache

    root = str(Path(__file__).resolve().parents[1])  # the checkout: benchmarks/ is beside scripts/
    if root not in sys.path:
        sys.path.insert(0, root)
    from benchmarks.quality.anchors import ANCHORS, AnchorEmbedder

    if name not in {label for label, kind, _, _ in ANCHORS.values() if kind == "dense"}:
        raise SystemExit(f"no dense anchor is {name!r}")

    def no_encoding(texts: list[str], role: str) -> np.ndarray:
        raise RuntimeError("the anchor's cache is only read here")

    cache = EmbeddingCache(anchor_cache)
    folder = cache.folder(AnchorEmbedder(name, max_length, no_encoding, dim=0).fingerprint(), "document")
    parts = sorted(Path(folder).glob("part-*.npz"))
    if not parts:
        return {}
    probe = AnchorEmbedder(name, max_length, no_encoding, dim=int(np.load(parts[0])["vectors"].shape[1]))
    vecs, found = cache.lookup(probe, texts, "document")
    return {t: vecs[i] for i, t in enumerate(texts) if found[i]}


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
    ap.add_argument("--seed-from-anchor", default=None, metavar="DIR",
                    help="an anchor run's embedding cache (benchmarks/quality/anchors.py --cache) to copy document vectors from")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    todo = mix_texts(args.data, args.data_mix, args.corpus, args.negatives, seeds, args.split)
    if args.seed_from_anchor:
        name = args.teacher.strip().lower()
        length = replay_max_length(name, args.max_length)
        docs = [t for r, t in todo if r == "document"]
        replay = ReplayTeacher(name, length, anchor_vectors(args.seed_from_anchor, name, length, docs))
        seeded = CachedTeacher(replay, args.cache, shard_size=args.shard_size)
        new = [t for t in replay.vectors if not seeded.contains(t, "document")]
        if new:
            seeded.embed(new, "document")
        seeded.flush()
        print(f"{len(new)} document vectors copied from {args.seed_from_anchor} "
              f"({len(replay.vectors)} of the mix's {len(docs)} documents are there)", flush=True)
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
