"""A small BEIR test collection cut from a large one: every judged document of a split plus
seeded random distractors. Shared by the benchmarks that cannot afford a full-corpus encode
per configuration (bench_model_choice.py, bench_training.py).

Result file: none of its own (a helper: the sampled collection goes to a folder outside git).
Command: none (imported by defaults/bench_model_choice.py and training/bench_training.py).
"""
from __future__ import annotations

import json
import random
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

from alignir.retrieval.beir import load_beir  # noqa: E402


def write_sample(src: Path, dst: Path, n_docs: int, split: str = "test", seed: int = 0) -> Path:
    """A BEIR folder holding every judged document of ``split`` plus random distractors, up
    to ``n_docs`` documents (queries and qrels copied for that split)."""
    if (dst / "corpus.jsonl").exists():
        return dst
    data = load_beir(src, split=split)
    judged = sorted({d for rel in data.qrels.values() for d in rel})
    rest = sorted(set(data.corpus) - set(judged))
    random.Random(seed).shuffle(rest)
    keep = set(judged) | set(rest[:max(0, n_docs - len(judged))])
    (dst / "qrels").mkdir(parents=True, exist_ok=True)
    with open(src / "corpus.jsonl", encoding="utf-8") as f, open(dst / "corpus.jsonl", "w", encoding="utf-8") as out:
        for line in f:
            if line.strip() and json.loads(line)["_id"] in keep:
                out.write(line)
    with open(dst / "queries.jsonl", "w", encoding="utf-8") as out:
        for qid in data.qrels:
            out.write(json.dumps({"_id": qid, "text": data.queries[qid]}) + "\n")
    with open(dst / "qrels" / f"{split}.tsv", "w", encoding="utf-8") as out:
        out.write("query-id\tcorpus-id\tscore\n")
        for qid, rel in data.qrels.items():
            for did, s in rel.items():
                out.write(f"{qid}\t{did}\t{s}\n")
    return dst
