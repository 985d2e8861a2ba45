"""The training data mix (``--data-mix``): supervised pairs from qrels plus unsupervised pairs
built from a corpus alone (title <-> abstract, independent crops as in Contriever), with a
description of what was used for the run's saved config."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from alignir.encoders.train import unsupervised as un
from alignir.encoders.train.data import Pair, load_pairs, queries_shared_with_test
from alignir.errors import InvalidInputError

__all__ = ["MIX_SOURCES", "FORBIDDEN_SPLITS", "parse_mix", "load_mix", "negatives_per_pair"]


#: pair sources of ``--data-mix``: supervised = the qrels split (or a triples jsonl); title and crop
#: are unsupervised pairs from a corpus alone (encoders/train/unsupervised.py)
MIX_SOURCES = ("supervised", "title", "crop")
#: qrels splits that never train (they measure the product)
FORBIDDEN_SPLITS = ("test",)


def parse_mix(spec: str | None) -> list[tuple[str, int | None]]:
    """``"supervised,title=2000,crop"`` -> [("supervised", None), ("title", 2000), ("crop", None)]
    (``=N`` caps a source at N pairs, drawn with the seed). None / "" -> supervised only."""
    if not spec:
        return [("supervised", None)]
    out: list[tuple[str, int | None]] = []
    for item in spec.split(","):
        name, _, cap = item.strip().partition("=")
        name = name.strip()
        if name not in MIX_SOURCES:
            raise InvalidInputError(f"unknown data source {name!r} in data mix {spec!r}; use {', '.join(MIX_SOURCES)}")
        if any(n == name for n, _ in out):
            raise InvalidInputError(f"data source {name!r} appears twice in data mix {spec!r}")
        try:
            n = int(cap) if cap else None
        except ValueError:
            raise InvalidInputError(f"data mix {spec!r}: the cap of {name!r} must be an integer, got {cap!r}") from None
        if n is not None and n < 1:
            raise InvalidInputError(f"data mix {spec!r}: the cap of {name!r} must be >= 1")
        out.append((name, n))
    return out


def negatives_per_pair(pairs: list[Pair], requested: int) -> int | dict[str, int]:
    """The hard negatives the pairs carry: their number when every pair has the same (``requested``
    for no pairs), else {"min", "max"} (a triples file brings its own; mining may find fewer)."""
    counts = {len(p.negatives) for p in pairs}
    if not counts:
        return requested
    return counts.pop() if len(counts) == 1 else {"min": min(counts), "max": max(counts)}


def load_mix(path: str | Path, spec: str | None = None, split: str = "train", n_negatives: int = 1, seed: int = 0,
             max_examples: int | None = None, corpora: list[str] | None = None) -> tuple[list[Pair], dict]:
    """Pairs of every source of the data mix ``spec`` (see :func:`parse_mix`), concatenated, and a
    description of them (sources, counts, split) for the run's saved config.

    The supervised source reads ``path``; the unsupervised ones (title, crop) read the corpus of
    every folder in ``corpora`` (default: ``path`` alone), each corpus mining its own BM25
    negatives, a cap ``=N`` applying per corpus. ``max_examples`` keeps the first N queries of the
    supervised source; test qrels (``split="test"``) are refused: they never train.
    """
    sources = parse_mix(spec)
    if split in FORBIDDEN_SPLITS and any(n == "supervised" for n, _ in sources):
        raise InvalidInputError(f"the {split!r} qrels never train (they measure the product); use the train split")
    pairs: list[Pair] = []
    desc: dict = {"path": str(path), "mix": spec or "supervised", "sources": []}
    docs: dict[str, list] = {}
    for name, cap in sources:
        if name == "supervised":
            got = load_pairs(path, split, n_negatives=n_negatives, seed=seed, max_queries=max_examples)
            if cap and len(got) > cap:
                keep = sorted(np.random.default_rng([seed, 3]).permutation(len(got))[:cap])
                got = [got[int(i)] for i in keep]
            row = {"name": name, "count": len(got), "negatives_per_pair": negatives_per_pair(got, n_negatives),
                   "qrels_split": split if Path(path).is_dir() else None, "file": None if Path(path).is_dir() else str(path)}
            if Path(path).is_dir():
                row["dropped_test_queries"] = queries_shared_with_test(path, split)
            desc["sources"].append(row)
            pairs.extend(got)
            continue
        fn = un.title_pairs if name == "title" else un.crop_pairs
        for corpus in corpora or [str(path)]:
            if corpus not in docs:
                docs[corpus] = un.load_corpus_docs(corpus)
            got = fn(docs[corpus], n_negatives=n_negatives, seed=seed, max_pairs=cap)
            desc["sources"].append({"name": name, "corpus": str(corpus), "count": len(got),
                                    "negatives_per_pair": negatives_per_pair(got, n_negatives),
                                    "from": "corpus.jsonl (no queries, no qrels)", "corpus_docs": len(docs[corpus])})
            pairs.extend(got)
    desc["total"] = len(pairs)
    return pairs, desc
