"""Unsupervised training pairs from a corpus alone (no queries, no qrels).

- ``title_pairs``: a document's title as the query, its abstract (body text, without a leading copy
  of the title) as the positive — the title ↔ body pairs of Contriever-style pre-training data.
- ``crop_pairs``: *independent cropping* (Izacard et al., "Unsupervised Dense Information Retrieval
  with Contrastive Learning" (Contriever), §3.2): two spans of one document drawn independently,
  each covering a uniform 10–50 % of its words; one is the query, the other the positive.

Hard negatives are mined with BM25 (bm25s) over the same corpus: the top-ranked *other* documents
for the query (their abstract for title pairs, an independent crop of them for crop pairs). Every
draw comes from ``numpy.random.default_rng`` seeded by (seed, document index), so the pairs are
the same for a seed whatever the other settings. Only ``corpus.jsonl`` is read: no test qrel or
test query can enter these pairs.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from alignir.encoders.train.data import Pair, _read_jsonl, bm25_top
from alignir.errors import InvalidInputError

__all__ = ["CorpusDoc", "load_corpus_docs", "crop_span", "body_without_title", "title_pairs", "crop_pairs", "MIN_CROP_WORDS"]

#: documents with fewer words than this give no crop pairs (a 10 % span would be empty)
MIN_CROP_WORDS = 10


@dataclass(frozen=True)
class CorpusDoc:
    id: str
    title: str
    text: str


def load_corpus_docs(path: str | Path) -> list[CorpusDoc]:
    """Documents of a BEIR folder's ``corpus.jsonl`` (or a jsonl file with ``text`` + optional ``title``)."""
    p = Path(path)
    f = p / "corpus.jsonl" if p.is_dir() else p
    if not f.is_file() or f.suffix != ".jsonl":
        raise InvalidInputError(f"unsupervised pairs need a BEIR folder with corpus.jsonl or a corpus .jsonl, got {str(path)!r}")
    docs = []
    for n, d in enumerate(_read_jsonl(f)):
        title, text = d.get("title") or "", d.get("text") or ""
        if not isinstance(title, str) or not isinstance(text, str):
            raise InvalidInputError(f"{f}:{n + 1}: 'title' and 'text' must be strings")
        docs.append(CorpusDoc(str(d.get("_id", n)), title.strip(), text.strip()))
    if not docs:
        raise InvalidInputError(f"{f}: no documents")
    return docs


def crop_span(words: list[str], rng: np.random.Generator, min_ratio: float = 0.1, max_ratio: float = 0.5) -> str:
    """One random span of ``words``: length = round(r · len) with r ~ U[min_ratio, max_ratio]
    (at least one word), start uniform over the positions where it fits (Contriever §3.2)."""
    if not words:
        raise InvalidInputError("cannot crop an empty document")
    if not 0 < min_ratio <= max_ratio <= 1:
        raise InvalidInputError(f"need 0 < min_ratio <= max_ratio <= 1, got {min_ratio}, {max_ratio}")
    n = len(words)
    length = max(1, min(n, int(round(rng.uniform(min_ratio, max_ratio) * n))))
    start = int(rng.integers(0, n - length + 1))
    return " ".join(words[start:start + length])


def _bm25_neighbours(corpus: list[str], queries: list[str], sources: list[int], depth: int) -> list[list[int]]:
    """For query i, the top ``depth`` BM25 documents of ``corpus`` other than ``sources[i]``."""
    rows = bm25_top("the corpus", corpus, queries, min(len(corpus), depth + 1))
    return [[j for j in row if j != src][:depth] for row, src in zip(rows, sources)]


def _with_negatives(queries: list[str], positives: list[str], sources: list[int], corpus: list[str],
                    n_negatives: int, depth: int, seed: int, negative_text) -> list[Pair]:
    mined = _bm25_neighbours(corpus, queries, sources, depth) if n_negatives > 0 else [[] for _ in queries]
    out = []
    for q, p, src, cands in zip(queries, positives, sources, mined):
        cands = [j for j in cands if corpus[j]]
        rng = np.random.default_rng([seed, src, 1])
        pick = rng.choice(len(cands), size=min(n_negatives, len(cands)), replace=False) if cands else []
        out.append(Pair(q, p, [negative_text(cands[int(i)], rng) for i in pick]))
    return out


def _subset(idx: list[int], max_pairs: int | None, seed: int) -> list[int]:
    if max_pairs and len(idx) > max_pairs:
        keep = np.random.default_rng([seed, 7]).permutation(len(idx))[:max_pairs]
        return [idx[i] for i in sorted(keep)]
    return idx


def body_without_title(doc: CorpusDoc) -> str:
    """The document's text with a leading copy of its title removed (Cranfield texts open with
    their title: the pair would be solved by string matching). Matching ignores case and
    punctuation; texts that do not start with the title are returned unchanged."""
    title, text = [m.group().lower() for m in re.finditer(r"\w+", doc.title)], doc.text
    lead = [m for _, m in zip(title, re.finditer(r"\w+", text))]  # word by word, as the title's
    if not title or [m.group().lower() for m in lead] != title:
        return text
    return text[lead[-1].end():].lstrip(" .,;:-\n\t")


def title_pairs(docs: list[CorpusDoc], n_negatives: int = 1, seed: int = 0, max_pairs: int | None = None,
                depth: int = 30) -> list[Pair]:
    """(title, body) of every document that has both (the body without a leading copy of the title,
    :func:`body_without_title`); negatives: the bodies of BM25 neighbours."""
    bodies = [body_without_title(d) if d.title else d.text for d in docs]
    idx = _subset([i for i, d in enumerate(docs) if d.title and bodies[i]], max_pairs, seed)
    if not idx:
        raise InvalidInputError("no document has both a title and a text: no title pairs")
    return _with_negatives([docs[i].title for i in idx], [bodies[i] for i in idx], idx, bodies,
                           n_negatives, depth, seed, lambda j, rng: bodies[j])


def crop_pairs(docs: list[CorpusDoc], n_negatives: int = 1, seed: int = 0, max_pairs: int | None = None,
               min_ratio: float = 0.1, max_ratio: float = 0.5, depth: int = 30) -> list[Pair]:
    """Two independent crops of each document's text with >= MIN_CROP_WORDS words (query, positive);
    negatives: a crop of a BM25 neighbour of the query crop."""
    words = [d.text.split() for d in docs]
    idx = _subset([i for i, w in enumerate(words) if len(w) >= MIN_CROP_WORDS], max_pairs, seed)
    if not idx:
        raise InvalidInputError(f"no document has {MIN_CROP_WORDS} words or more: no crop pairs")
    queries, positives = [], []
    for i in idx:
        rng = np.random.default_rng([seed, i, 0])
        queries.append(crop_span(words[i], rng, min_ratio, max_ratio))
        positives.append(crop_span(words[i], rng, min_ratio, max_ratio))
    bodies = [d.text for d in docs]
    return _with_negatives(queries, positives, idx, bodies, n_negatives, depth, seed,
                           lambda j, rng: crop_span(words[j], rng, min_ratio, max_ratio) if words[j] else bodies[j])
