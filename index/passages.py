"""Passage map and passage-to-document score aggregation (issue 17 item 1, groundwork).

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
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from alignir.errors import InvalidInputError

__all__ = ["AGGREGATIONS", "PassageMap", "aggregate"]

AGGREGATIONS = ("maxp", "firstp", "sumk")
DOC_FILE, ORDINAL_FILE = "passage_doc.npy", "passage_ordinal.npy"


@dataclass(frozen=True)
class PassageMap:
    """``doc[r]``: the document number of row r; ``ordinal[r]``: its passage number in that
    document (0 = the first). Rows of one document are contiguous and in passage order."""

    doc: np.ndarray
    ordinal: np.ndarray

    def __post_init__(self) -> None:
        doc = np.asarray(self.doc, dtype=np.int64)
        ordinal = np.asarray(self.ordinal, dtype=np.int32)
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
    def from_counts(cls, counts: Any) -> "PassageMap":
        """The map of documents with ``counts[i]`` passages each (every count >= 1)."""
        counts = np.asarray(counts, dtype=np.int64)
        if counts.ndim != 1 or np.any(counts < 1):
            raise InvalidInputError("passage counts must be a 1-d array of integers >= 1")
        doc = np.repeat(np.arange(len(counts)), counts)
        first = np.repeat(np.cumsum(counts) - counts, counts)
        return cls(doc, (np.arange(len(doc)) - first).astype(np.int32))

    @property
    def n_rows(self) -> int:
        return int(len(self.doc))

    @property
    def n_docs(self) -> int:
        return int(self.doc[-1]) + 1 if len(self.doc) else 0

    def passage_id(self, row: int, doc_ids: Any) -> str:
        """``doc_id#ordinal`` of a row (the id Pyserini's MaxP runs give a passage)."""
        return f"{doc_ids[int(self.doc[row])]}#{int(self.ordinal[row])}"

    def save(self, folder: str | Path) -> None:
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        np.save(folder / DOC_FILE, self.doc, allow_pickle=False)
        np.save(folder / ORDINAL_FILE, self.ordinal, allow_pickle=False)

    @classmethod
    def load(cls, folder: str | Path) -> "PassageMap":
        folder = Path(folder)
        return cls(np.load(folder / DOC_FILE, allow_pickle=False),
                   np.load(folder / ORDINAL_FILE, allow_pickle=False))

    def describe(self) -> dict[str, int]:
        return {"rows": self.n_rows, "docs": self.n_docs}


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
