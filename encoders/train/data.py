"""Training data: (query, positive, hard negatives) pairs and raw texts, plus a resumable batcher.

Sources:
- a BEIR folder (corpus.jsonl, queries.jsonl, qrels/<split>.tsv): one pair per relevant
  (query, document); hard negatives are mined with BM25 (bm25s) as the top-ranked documents that
  are not judged relevant;
- a jsonl of triples: {"query", "positive"|"pos", "negatives"|"negative"|"neg" (str or list),
  optionally "relevant" (the texts of every document judged relevant to the query: none of them
  is an in-batch negative of it)}; scripts/mine_negatives.py writes one from a BEIR split;
- raw text for the unsupervised tasks: a BEIR folder's corpus, a jsonl with "text" (+ "title"),
  or a .txt file with one text per line.
"""
from __future__ import annotations

from alignir.errors import InvalidInputError
from alignir.qrels import read_qrels

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

import numpy as np

__all__ = ["Pair", "JudgedSplit", "judged_split", "load_beir_pairs", "queries_shared_with_test", "load_triples", "triple_row", "load_texts", "load_pairs", "batch_indices", "doc_text",
           "normal_query", "bm25_top",
           "describe_texts"]


@dataclass
class Pair:
    """One training example. ``relevant``: the texts of every document judged relevant to the
    query's text (BEIR pairs; empty for triples and unsupervised pairs, where only ``positive`` is
    known): no loss may treat one of them as a negative of this query (``base.in_batch_candidates``)."""
    query: str
    positive: str
    negatives: list[str] = field(default_factory=list)
    relevant: tuple[str, ...] = ()


def doc_text(doc: dict) -> str:
    """BEIR document text: title and text joined by a space (either may be missing)."""
    parts = (doc.get("title", "") or "", doc.get("text", "") or "")
    if not all(isinstance(s, str) for s in parts):
        raise InvalidInputError(f"document {doc.get('_id', '?')!r}: 'title' and 'text' must be strings, "
                                f"got {type(parts[0]).__name__} and {type(parts[1]).__name__}")
    return " ".join(s for s in parts if s).strip()


def normal_query(text: str) -> str:
    """A query's text case-folded with whitespace collapsed: two query ids with equal normal texts
    are one query (SciFact's train split holds such pairs, e.g. 85 = 86, 89 = 90)."""
    return " ".join(text.casefold().split())


def _read_jsonl(path: Path) -> list[dict]:
    return [row for _, row in _numbered_jsonl(path)]


def _numbered_jsonl(path: Path) -> list[tuple[int, dict]]:
    """(line number, record) of a jsonl file; blank lines skipped."""
    out = []
    with open(path, encoding="utf-8-sig") as fh:  # -sig: a byte order mark is not part of line 1
        for n, line in enumerate(fh, 1):
            line = line.strip()
            if not line:
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise InvalidInputError(f"{path}:{n}: not valid JSON ({e.msg})") from None
            if not isinstance(row, dict):
                raise InvalidInputError(f"{path}:{n}: a record must be a JSON object, got {type(row).__name__}")
            out.append((n, row))
    return out


def _beir(folder: Path, split: str):
    for name in ("corpus.jsonl", "queries.jsonl"):
        if not (folder / name).is_file():
            raise InvalidInputError(f"{folder} is not a BEIR folder: {name} is missing")
    qrels_file = folder / "qrels" / f"{split}.tsv"
    if not qrels_file.is_file():
        have = sorted(p.stem for p in (folder / "qrels").glob("*.tsv")) if (folder / "qrels").is_dir() else []
        raise InvalidInputError(f"no qrels for split {split!r} in {folder} (have: {have})")
    corpus = {_id(d, folder / "corpus.jsonl", n): doc_text(d) for n, d in enumerate(_read_jsonl(folder / "corpus.jsonl"), 1)}
    queries = {}
    for n, q in _numbered_jsonl(folder / "queries.jsonl"):
        text = q.get("text", "")
        if not isinstance(text, str):
            raise InvalidInputError(f"{folder / 'queries.jsonl'}:{n}: 'text' must be a string, got {type(text).__name__}")
        if not text.strip():
            raise InvalidInputError(f"{folder / 'queries.jsonl'}:{n}: the query text is empty (nothing to train on)")
        queries[_id(q, folder / "queries.jsonl", n)] = text
    return corpus, queries, read_qrels(qrels_file)


def _id(row: dict, path: Path, n: int) -> str:
    if "_id" not in row:
        raise InvalidInputError(f"{path}: record {n} has no '_id' field")
    return str(row["_id"])


def queries_shared_with_test(folder: str | Path, split: str = "train") -> list[str]:
    """Ids of ``split``'s judged queries whose text is a query judged in the folder's test split.

    Texts are compared case-folded with whitespace collapsed. BEIR's SciFact has two: train 871 =
    test 870 and train 1291 = test 1292, each with the same relevant document; training on them
    would train on the test set. Empty for the test split itself or a folder without test qrels.
    """
    folder = Path(folder)
    test_file = folder / "qrels" / "test.tsv"
    if split == "test" or not test_file.is_file():
        return []
    _, queries, qrels = _beir(folder, split)
    test_texts = {normal_query(queries[q]) for q in read_qrels(test_file) if q in queries}
    return sorted((q for q in qrels if q in queries and normal_query(queries[q]) in test_texts),
                  key=lambda s: (len(s), s))


@dataclass
class JudgedSplit:
    """A BEIR split read for training pairs: documents (id -> :func:`doc_text`), queries, qrels,
    ``qids`` (the judged queries with a relevant document, in (length, id) order), ``relevant``
    (normal query text, :func:`normal_query` -> ids of the documents judged relevant to any query
    id with that text), ``shared`` (ids whose text is also a test query: they give no pairs), and
    where they come from (``folder``, ``split``)."""
    corpus: dict[str, str]
    queries: dict[str, str]
    qrels: dict[str, dict[str, int]]
    qids: list[str]
    relevant: dict[str, set[str]]
    shared: set[str]
    folder: Path
    split: str

    def relevant_to(self, qid: str) -> set[str]:
        """Ids of the documents judged relevant to ``qid``'s text: never its negatives."""
        return self.relevant[normal_query(self.queries[qid])]

    def pairs(self, negatives: Callable[[str], list[str]]) -> list[tuple[str, str, list[str]]]:
        """(query id, relevant document id, negative document ids) for every judged relevant
        document of every query in ``qids``, a (query text, document) pair once, no pair from
        ``shared`` ids. ``negatives(qid)`` is called once per judged pair, in order, those that
        are dropped included (a seeded draw then gives every kept pair what it would be without
        the dropped ones)."""
        out, seen, n_judged = [], set(), 0
        for q in self.qids:
            text = normal_query(self.queries[q])
            for d, rel in sorted(self.qrels[q].items()):
                if rel <= 0 or d not in self.corpus:
                    continue
                n_judged += 1
                negs = negatives(q)
                if q not in self.shared and (text, d) not in seen:
                    seen.add((text, d))
                    out.append((q, d, negs))
        if not n_judged:
            raise InvalidInputError(f"none of the documents judged relevant in {self.folder} split {self.split!r} "
                                    f"is in {self.folder / 'corpus.jsonl'}")
        if not out:
            raise InvalidInputError(f"every judged query of {self.folder} split {self.split!r} is also a test query")
        return out

    def pair(self, qid: str, doc: str, negatives: list[str]) -> Pair:
        """The training example of :meth:`pairs`' ``(qid, doc, negatives)``, carrying the texts of
        every document judged relevant to the query's text."""
        rel_texts = tuple(self.corpus[d] for d in sorted(self.relevant_to(qid)) if d in self.corpus)
        return Pair(self.queries[qid], self.corpus[doc], [self.corpus[n] for n in negatives], rel_texts)


def judged_split(folder: str | Path, split: str = "train", max_queries: int | None = None) -> JudgedSplit:
    """Read ``split`` of a BEIR folder for pairs (:class:`JudgedSplit`); ``max_queries``: only the
    first that many judged queries."""
    folder = Path(folder)
    corpus, queries, qrels = _beir(folder, split)
    if not corpus:
        raise InvalidInputError(f"{folder / 'corpus.jsonl'} holds no documents")
    shared = set(queries_shared_with_test(folder, split))
    qids = [q for q in sorted(qrels, key=lambda s: (len(s), s)) if q in queries and any(v > 0 for v in qrels[q].values())]
    if max_queries:
        qids = qids[:max_queries]
    if not qids:
        raise InvalidInputError(f"no judged queries with relevant documents in {folder} split {split!r}")
    relevant: dict[str, set[str]] = {}  # normal query text -> documents judged relevant to it
    for q, row in qrels.items():
        if q in queries:
            relevant.setdefault(normal_query(queries[q]), set()).update(d for d, v in row.items() if v > 0)
    return JudgedSplit(corpus, queries, qrels, qids, relevant, shared, folder, split)


def load_beir_pairs(folder: str | Path, split: str = "train", n_negatives: int = 1, mine_depth: int = 30,
                    seed: int = 0, max_queries: int | None = None) -> list[Pair]:
    """Pairs from a BEIR split; ``n_negatives`` BM25 hard negatives per pair, drawn (seeded) from the
    top ``mine_depth`` BM25 documents that are not relevant to the query.

    Query ids with the same text (:func:`normal_query`) are one query: a document judged relevant
    to either is never mined as a negative of either, and a (query text, document) pair is kept
    once. Each pair carries the texts of all documents judged relevant to its query text
    (``Pair.relevant``). Queries whose text is also a test query (:func:`queries_shared_with_test`)
    give no pairs; they and repeated pairs are dropped after the negatives are drawn, so every
    other pair is what it would be with them.
    """
    js = judged_split(folder, split, max_queries)
    doc_ids = list(js.corpus)
    mined: dict[str, list[str]] = {q: [] for q in js.qids}
    if n_negatives > 0:
        k = min(len(doc_ids), mine_depth + max(max(len(js.qrels[q]), len(js.relevant_to(q))) for q in js.qids))
        rows = bm25_top(js.folder, [js.corpus[d] for d in doc_ids], [js.queries[q] for q in js.qids], k)
        for q, row in zip(js.qids, rows):
            rel = js.relevant_to(q)
            mined[q] = [doc_ids[i] for i in row if doc_ids[i] not in rel][:mine_depth]
    rng = np.random.default_rng(seed)

    def draw(q: str) -> list[str]:
        cands = mined[q]
        pick = rng.choice(len(cands), size=min(n_negatives, len(cands)), replace=False) if cands else []
        return [cands[int(i)] for i in pick]

    return [js.pair(q, d, negs) for q, d, negs in js.pairs(draw)]


def bm25_top(source: str | Path, texts: list[str], queries: list[str], k: int) -> list[list[int]]:
    """For each query, the rows of ``texts`` in BM25 order (bm25s, English stopwords), top ``k``;
    ``source`` names where the texts come from in the error when none has an indexable word.

    The order is the same on every machine: documents of equal score (rounded to 1e-5, so
    summation order cannot split them) come in row order. A top-k selection breaks such ties by
    its SIMD path (AVX2 and AVX-512 builds of numpy differ), and a mined negative that moves
    changes the training examples, so a run paused on one machine could not resume on another."""
    import bm25s

    retriever = bm25s.BM25()
    tokens = bm25s.tokenize(texts, stopwords="en", show_progress=False)
    if not tokens.vocab:
        raise InvalidInputError(f"{source}: no document has a word BM25 indexes (all empty, one letter or "
                                f"stopwords): no hard negatives can be mined (use --negatives 0)")
    retriever.index(tokens, show_progress=False)
    rows = np.arange(len(texts))
    k = min(int(k), len(texts))
    out = []
    for words in bm25s.tokenize(queries, stopwords="en", return_ids=False, show_progress=False):
        known = [w for w in words if w in retriever.vocab_dict]
        scores = retriever.get_scores(known) if known else np.zeros(len(texts))
        key = np.round(np.asarray(scores, dtype=np.float64), 5)
        out.append([int(i) for i in np.lexsort((rows, -key))[:k]])
    return out


def triple_row(pair: Pair) -> dict:
    """``pair`` as a record of the triples jsonl (:func:`load_triples` reads it back equal)."""
    row = {"query": pair.query, "positive": pair.positive, "negatives": list(pair.negatives)}
    if pair.relevant:
        row["relevant"] = list(pair.relevant)
    return row


def load_triples(path: str | Path) -> list[Pair]:
    """Pairs from a jsonl of {"query", "positive"/"pos", "negatives"/"negative"/"neg", "relevant"?};
    a record with an empty text is refused naming its line."""
    out = []
    for n, r in _numbered_jsonl(Path(path)):
        q = r.get("query")
        p = r.get("positive", r.get("pos"))
        neg = r.get("negatives", r.get("negative", r.get("neg", [])))
        if isinstance(p, list):
            p = p[0] if p else None
        if not isinstance(q, str) or not isinstance(p, str):
            raise InvalidInputError(f"{path}:{n}: a triple needs string 'query' and 'positive' fields")
        negs = [neg] if isinstance(neg, str) else neg if isinstance(neg, list) else [] if neg is None else None
        if negs is None or not all(isinstance(x, str) for x in negs):
            raise InvalidInputError(f"{path}:{n}: 'negatives' must be a string or a list of strings")
        empty = [name for name, text in (("query", q), ("positive", p), *(("negative", x) for x in negs))
                 if not text.strip()]
        if empty:
            raise InvalidInputError(f"{path}:{n}: empty {empty[0]} text (a triple needs non-empty texts)")
        rel = r.get("relevant", [])
        if not isinstance(rel, list) or not all(isinstance(x, str) for x in rel):
            raise InvalidInputError(f"{path}:{n}: 'relevant' must be a list of strings")
        out.append(Pair(q, p, list(negs), tuple(rel)))
    if not out:
        raise InvalidInputError(f"{path}: no triples")
    return out


def load_pairs(path: str | Path, split: str = "train", n_negatives: int = 1, seed: int = 0,
               max_queries: int | None = None) -> list[Pair]:
    """A BEIR folder or a triples jsonl."""
    p = Path(path)
    if p.is_dir():
        return load_beir_pairs(p, split, n_negatives=n_negatives, seed=seed, max_queries=max_queries)
    if p.is_file() and p.suffix == ".jsonl":
        pairs = load_triples(p)
        return pairs[:max_queries] if max_queries else pairs
    raise InvalidInputError(f"pair data must be a BEIR folder or a .jsonl of triples, got {str(path)!r}")


def load_texts(path: str | Path, max_texts: int | None = None, min_chars: int = 1) -> list[str]:
    """Raw texts: a BEIR folder (its corpus), a jsonl with "text" (+ "title"), or a .txt file."""
    p = Path(path)
    if p.is_dir():
        if not (p / "corpus.jsonl").is_file():
            raise InvalidInputError(f"{p}: a text folder must be a BEIR folder with corpus.jsonl")
        texts = [doc_text(d) for d in _read_jsonl(p / "corpus.jsonl")]
    elif p.is_file() and p.suffix == ".jsonl":
        texts = []
        for n, r in enumerate(_read_jsonl(p), 1):
            if "text" not in r:
                raise InvalidInputError(f"{p}:{n}: no 'text' field")
            texts.append(doc_text(r))
    elif p.is_file():
        texts = [ln.strip() for ln in p.read_text(encoding="utf-8").splitlines()]
    else:
        raise InvalidInputError(f"text data {str(path)!r} does not exist")
    texts = [t for t in texts if len(t) >= min_chars]
    if max_texts:
        texts = texts[:max_texts]
    if not texts:
        raise InvalidInputError(f"{path}: no texts")
    return texts


def batch_indices(n: int, batch_size: int, seed: int, start_step: int = 0) -> Iterator[list[int]]:
    """Endless deterministic batches: epoch e visits a permutation seeded by (seed, e).

    Batch s covers stream positions s*B .. s*B+B-1, so resuming at ``start_step`` continues exactly.
    A batch that spans the end of epoch e-1 and the start of epoch e would hold an example twice if
    epoch e's permutation starts with one of e-1's last examples (its positive would then be its own
    in-batch negative); such an example is swapped with the first later one the batch does not hold
    (:func:`_epoch_order`). Epochs without that clash keep the plain permutation. With
    ``n < batch_size`` every batch must repeat examples and the permutations are used as they are.
    """
    if n < 1 or batch_size < 1:
        raise InvalidInputError(f"need n >= 1 and batch_size >= 1, got {n}, {batch_size}")
    orders: dict[int, np.ndarray] = {}

    def order(e: int) -> np.ndarray:
        if e not in orders:
            first = max((k for k in orders if k < e), default=-1) + 1  # epochs chain: compute the missing ones
            for k in range(first, e + 1):
                orders[k] = _epoch_order(n, batch_size, seed, k, orders.get(k - 1))
            for k in [k for k in orders if k < e - 1]:
                del orders[k]
        return orders[e]

    step = start_step
    while True:
        yield [int(order(p // n)[p % n]) for p in range(step * batch_size, (step + 1) * batch_size)]
        step += 1


def _epoch_order(n: int, batch_size: int, seed: int, epoch: int, previous: np.ndarray | None) -> np.ndarray:
    """Epoch ``epoch``'s visiting order, given the previous epoch's (None for epoch 0).

    The batch spanning the boundary holds the previous epoch's last ``t = epoch*n mod B`` examples and
    this epoch's first ``B - t``; each of those first that is among the ``t`` is swapped, in order,
    with the next later example that is not.
    """
    order = np.random.default_rng([seed, epoch]).permutation(n)
    tail = (epoch * n) % batch_size
    if previous is None or tail == 0 or n < batch_size:
        return order
    held = set(previous[n - tail:].tolist())
    j = head = batch_size - tail
    for i in range(head):
        if int(order[i]) in held:
            while int(order[j]) in held:
                j += 1
            order[i], order[j] = order[j], order[i]
            j += 1
    return order


def describe_texts(path: str | Path, texts: list[str]) -> dict:
    """The data description of a raw-text stage (IC-text, RC, NLL, CTKD, UCL)."""
    return {"path": str(path), "mix": "texts", "sources": [{"name": "texts", "count": len(texts)}], "total": len(texts)}
