"""Passage map and passage-to-document score aggregation.

A long document is encoded as overlapping passages, each stored as its own row; the map says
which document (and which passage of it, 0-based in reading order) every row is. Search scores
rows; :func:`aggregate` turns row scores into document scores the way Dai & Callan, "Deeper
Text Understanding for IR with Contextual Neural Language Modeling" (SIGIR 2019, §3) do:

- ``"maxp"`` (default): a document scores as its best passage;
- ``"firstp"``: as its first passage (only the first passage's row counts);
- ``"sumk"``: the sum of its ``k`` best passage scores (k = 1 is MaxP).

Only rows that were retrieved count (a document whose rows all fell outside a leg's top list is
absent from that leg, as a whole document would be); FirstP ignores a document whose first
passage was not retrieved. Every document keeps the row of its best passage, so an
explanation can name the passage that matched. Pure numpy: no model code (``index/`` never
imports ``encoders/``).

The map is a part of the index folder (``index.parts``: ``passages/``, counted in documents):
an index without it has one row per document, as every index written before it. Each row may
keep the character span [start, end) of its passage in the document's encoded text
(title + " " + text), so an explanation can show where the match is.

:func:`search_documents` makes a passage-level top-k search return the exact document top-k
under each aggregation: it deepens the row search until no document outside the list can
enter it (MaxP: k distinct documents among the top rows suffice).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

import numpy as np

from alignir.errors import InvalidInputError

__all__ = ["AGGREGATIONS", "PassageMap", "aggregate", "parse_aggregation", "search_documents"]

AGGREGATIONS = ("maxp", "firstp", "sumk")
#: k of "sumk" when a spec does not give one ("sumk"; "sum3" gives it)
DEFAULT_SUM_K = 3
DOC_FILE, ORDINAL_FILE = "passage_doc.npy", "passage_ordinal.npy"
START_FILE, END_FILE = "passage_start.npy", "passage_end.npy"


@dataclass(frozen=True)
class PassageMap:
    """``doc[r]``: the document number of row r; ``ordinal[r]``: its passage number in that
    document (0 = the first). Rows of one document are contiguous and in passage order."""

    doc: np.ndarray
    ordinal: np.ndarray
    start: np.ndarray | None = None
    end: np.ndarray | None = None

    def __post_init__(self) -> None:
        doc = np.asarray(self.doc, dtype=np.int64)
        ordinal = np.asarray(self.ordinal, dtype=np.int32)
        if (self.start is None) != (self.end is None):
            raise InvalidInputError("passage map: give both spans (start and end) or neither")
        if self.start is not None:
            start, end = np.asarray(self.start, dtype=np.int64), np.asarray(self.end, dtype=np.int64)
            if start.shape != doc.shape or end.shape != doc.shape or np.any(start < 0) or np.any(end < start):
                raise InvalidInputError("passage map: spans must be one [start, end) with 0 <= start <= end per row")
            object.__setattr__(self, "start", start)
            object.__setattr__(self, "end", end)
        if doc.ndim != 1 or doc.shape != ordinal.shape:
            raise InvalidInputError(f"passage map: doc {doc.shape} and ordinal {ordinal.shape} must be "
                                    f"equal 1-d arrays")
        if len(doc):
            starts = np.r_[True, doc[1:] != doc[:-1]]
            if doc[0] != 0 or np.any(np.diff(doc) < 0) or np.any(np.diff(doc) > 1):
                raise InvalidInputError("passage map: rows must cover documents 0..n-1 in order")
            expect = np.arange(len(doc)) - np.maximum.accumulate(np.where(starts, np.arange(len(doc)), 0))
            if not np.array_equal(ordinal, expect):
                raise InvalidInputError("passage map: ordinals must count 0, 1, ... within each document")
        object.__setattr__(self, "doc", doc)
        object.__setattr__(self, "ordinal", ordinal)

    @classmethod
    def from_counts(cls, counts: Any, start: Any = None, end: Any = None) -> "PassageMap":
        """The map of documents with ``counts[i]`` passages each (every count >= 1);
        ``start`` / ``end``: the rows' character spans (optional)."""
        counts = np.asarray(counts, dtype=np.int64)
        if counts.ndim != 1 or np.any(counts < 1):
            raise InvalidInputError("passage counts must be a 1-d array of integers >= 1")
        doc = np.repeat(np.arange(len(counts)), counts)
        first = np.repeat(np.cumsum(counts) - counts, counts)
        return cls(doc, (np.arange(len(doc)) - first).astype(np.int32), start, end)

    @property
    def n_rows(self) -> int:
        return int(len(self.doc))

    @property
    def n_docs(self) -> int:
        return int(self.doc[-1]) + 1 if len(self.doc) else 0

    @property
    def counts(self) -> np.ndarray:
        """Passages per document (int64 [n_docs])."""
        return np.bincount(self.doc, minlength=self.n_docs).astype(np.int64)

    @property
    def first_row(self) -> np.ndarray:
        """The row of each document's first passage (int64 [n_docs])."""
        return np.flatnonzero(self.ordinal == 0).astype(np.int64)

    def rows_of(self, docs: Any) -> np.ndarray:
        """The rows of the documents ``docs`` (sorted int64): all their passages."""
        arr = np.asarray(docs)
        if arr.size and not np.issubdtype(arr.dtype, np.integer):  # a boolean mask or floats
            raise InvalidInputError(f"document numbers must be integers, got dtype {arr.dtype}")
        docs = np.unique(arr.astype(np.int64).ravel())
        if docs.size and (docs[0] < 0 or docs[-1] >= self.n_docs):
            raise InvalidInputError(f"document numbers must be in [0, {self.n_docs}), got {docs[[0, -1]].tolist()}")
        first, counts = self.first_row[docs], self.counts[docs]
        if not docs.size:
            return np.zeros(0, dtype=np.int64)
        return np.concatenate([np.arange(f, f + c) for f, c in zip(first.tolist(), counts.tolist())]).astype(np.int64)

    def passage_id(self, row: int, doc_ids: Any) -> str:
        """``doc_id#ordinal`` of a row (the id Pyserini's MaxP runs give a passage)."""
        return f"{doc_ids[int(self.doc[row])]}#{int(self.ordinal[row])}"

    def span(self, row: int) -> tuple[int, int] | None:
        """The character span [start, end) of row ``row`` in its document's text, if stored."""
        if self.start is None or self.end is None:
            return None
        return int(self.start[row]), int(self.end[row])

    def save(self, folder: str | Path) -> None:
        """Write the map (and the spans, when kept) into ``folder`` (new or empty; a part of
        the index folder, ``index.parts``)."""
        from alignir.index.parts import check_empty_folder

        folder = check_empty_folder(folder)
        np.save(folder / DOC_FILE, self.doc, allow_pickle=False)
        np.save(folder / ORDINAL_FILE, self.ordinal, allow_pickle=False)
        if self.start is not None and self.end is not None:
            np.save(folder / START_FILE, self.start, allow_pickle=False)
            np.save(folder / END_FILE, self.end, allow_pickle=False)

    @classmethod
    def load(cls, folder: str | Path, entry: Mapping[str, Any] | None = None, *,
             mmap: bool = True) -> "PassageMap":
        """Read a map written by :meth:`save` (read whole: it is small)."""
        folder = Path(folder)
        spans = (folder / START_FILE).is_file()
        try:
            return cls(np.load(folder / DOC_FILE, allow_pickle=False),
                       np.load(folder / ORDINAL_FILE, allow_pickle=False),
                       np.load(folder / START_FILE, allow_pickle=False) if spans else None,
                       np.load(folder / END_FILE, allow_pickle=False) if spans else None)
        except OSError as e:
            raise InvalidInputError(f"{folder}: cannot read the passage map ({e})") from None

    def describe(self) -> dict[str, Any]:
        """The manifest entry: rows, documents and whether the spans are kept."""
        return {"rows": self.n_rows, "docs": self.n_docs, "spans": self.start is not None}


def aggregate(row_scores: Mapping[int, float], pmap: PassageMap, how: str = "maxp",
              k: int = 3) -> dict[int, tuple[float, int]]:
    """Document scores from one query's row scores: ``{doc number: (score, best row)}``
    (best row: the highest-scoring retrieved passage of the document; ties -> the earlier
    passage). ``how``: "maxp", "firstp" or "sumk" (sum of the ``k`` best passage scores)."""
    if how not in AGGREGATIONS:
        raise InvalidInputError(f"passage aggregation must be one of {AGGREGATIONS}, got {how!r}")
    if how == "sumk" and (isinstance(k, bool) or not isinstance(k, int) or k < 1):
        raise InvalidInputError(f"sum-of-top-k needs k >= 1, got {k!r}")
    per_doc: dict[int, list[tuple[float, int]]] = {}
    for row, score in row_scores.items():
        row = int(row)
        if not 0 <= row < pmap.n_rows:
            raise InvalidInputError(f"row {row} is not in the passage map ({pmap.n_rows} rows)")
        per_doc.setdefault(int(pmap.doc[row]), []).append((float(score), row))
    out: dict[int, tuple[float, int]] = {}
    for d, hits in per_doc.items():
        hits.sort(key=lambda sr: (-sr[0], sr[1]))
        best_score, best_row = hits[0]
        if how == "maxp":
            out[d] = (best_score, best_row)
        elif how == "sumk":
            out[d] = (float(sum(s for s, _ in hits[:k])), best_row)
        else:
            first = [s for s, r in hits if pmap.ordinal[r] == 0]
            if first:
                out[d] = (first[0], best_row)
    return out


def parse_aggregation(spec: str | None) -> tuple[str, int]:
    """``"maxp"`` / ``"firstp"`` / ``"sumN"`` (sum of the N best passages; ``"sumk"``: N = 3)
    -> (aggregation, k). None: MaxP."""
    text = "maxp" if spec is None else str(spec).strip().lower()
    if text in ("maxp", "firstp"):
        return text, 1
    if text == "sumk":
        return "sumk", DEFAULT_SUM_K
    if text.startswith("sum") and text[3:].isdigit() and int(text[3:]) >= 1:
        return "sumk", int(text[3:])
    raise InvalidInputError(f"passage aggregation must be maxp, firstp or sumN (sum of the N best passages, "
                            f"e.g. sum3), got {spec!r}")


#: (query positions, rows to fetch, allowed rows or None) -> (rows int64 [q, R], scores [q, R]),
#: best first, padded with -1 (a leg's search over passage rows)
RowSearch = Callable[[np.ndarray, int, "np.ndarray | None"], "tuple[np.ndarray, np.ndarray]"]


def search_documents(search: RowSearch, n_queries: int, pmap: PassageMap, k: int, how: str = "maxp",
                     sum_k: int = DEFAULT_SUM_K, allowed: np.ndarray | None = None
                     ) -> list[dict[int, tuple[float, int]]]:
    """The exact top-``k`` documents per query under the aggregation ``how`` from a search
    over passage rows: ``{doc number: (score, best row)}`` per query (at most k entries).

    The rows are fetched deeper until the document list cannot change: MaxP needs k distinct
    documents among the top R rows (a document outside them scores at most the R-th row, no
    more than the k-th document); sum-of-top-k needs its k best documents complete (every one
    of their best ``sum_k`` passages seen) and above the bound of every other document (its
    seen passages plus the R-th score for each missing one); FirstP searches only the first
    passages, one row per document. When the search runs out of rows (fewer than R matched),
    the documents score by the rows it found, as :func:`aggregate` does. ``allowed``: document
    numbers (a filter; their rows are searched)."""
    if how not in AGGREGATIONS:
        raise InvalidInputError(f"passage aggregation must be one of {AGGREGATIONS}, got {how!r}")
    rows_allowed = None if allowed is None else pmap.rows_of(allowed)
    if how == "firstp":
        first = pmap.first_row
        rows_allowed = first if rows_allowed is None else np.intersect1d(first, rows_allowed)
    total = pmap.n_rows if rows_allowed is None else int(rows_allowed.size)
    out: list[dict[int, tuple[float, int]]] = [{} for _ in range(n_queries)]
    if total == 0 or n_queries == 0:
        return out
    need = sum_k if how == "sumk" else 1
    counts = pmap.counts if rows_allowed is None else np.bincount(pmap.doc[rows_allowed], minlength=pmap.n_docs)
    per_doc = max(1, -(-pmap.n_rows // max(1, pmap.n_docs)))
    depth = min(total, max(k, 2 * k * need * per_doc))
    pending = np.arange(n_queries)
    while pending.size:
        rows, scores = search(pending, depth, rows_allowed)
        again = []
        for j, q in enumerate(pending.tolist()):
            keep = rows[j] >= 0
            done = _documents(rows[j][keep], np.asarray(scores[j][keep], dtype=np.float64), pmap, k, how,
                              sum_k, counts, exhausted=int(keep.sum()) < depth or depth >= total)
            if done is None:
                again.append(q)
            else:
                out[q] = done
        pending = np.array(again, dtype=np.int64)
        depth = min(total, depth * 4)
    return out


def _documents(rows: np.ndarray, scores: np.ndarray, pmap: PassageMap, k: int, how: str, sum_k: int,
               counts: np.ndarray, exhausted: bool) -> dict[int, tuple[float, int]] | None:
    """The top-k documents of one query's top rows (best first), or None when deeper rows
    could still change them (see :func:`search_documents`)."""
    seen: dict[int, list[tuple[float, int]]] = {}
    for r, s in sorted(zip(rows.tolist(), scores.tolist()), key=lambda rs: (-rs[1], rs[0])):
        seen.setdefault(int(pmap.doc[r]), []).append((s, r))
    if how != "sumk":
        if not exhausted and len(seen) < k:
            return None
        docs = {d: (hits[0][0], hits[0][1]) for d, hits in seen.items()}
    else:
        docs = {d: (float(sum(s for s, _ in hits[:sum_k])), hits[0][1]) for d, hits in seen.items()}
        if not exhausted:
            last = float(scores.min()) if scores.size else 0.0
            missing = {d: min(sum_k, int(counts[d])) - min(sum_k, len(hits)) for d, hits in seen.items()}
            done = sorted((d for d in seen if missing[d] == 0), key=lambda d: (-docs[d][0], d))
            if len(done) < k:
                return None
            bound = last * (min(sum_k, int(counts.max())) if last > 0 else 1)   # a document not seen at all
            # a passage not fetched yet adds at most max(last, 0): the leg may never return it
            # (no shared term), and then it adds nothing, even when the fetched rows score < 0
            gain = max(last, 0.0)
            bound = max([bound] + [docs[d][0] + missing[d] * gain for d in seen if missing[d] > 0])
            if docs[done[k - 1]][0] <= bound:  # a tie at the bound may go to a lower doc number
                return None
            docs = {d: docs[d] for d in done}
    best = sorted(docs, key=lambda d: (-docs[d][0], d))[:k]
    return {d: docs[d] for d in best}
