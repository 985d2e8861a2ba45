"""The guard that keeps evaluation text out of training corpora.

Every sentence (cut at . ! ? ; before white space) of the evaluation collections (each BEIR folder under a root: corpus titles and
texts, query texts) of at least ``MIN_WORDS`` words is indexed by its first ``ANCHOR_WORDS``
normalised words (lower case, punctuation and spacing ignored). A record overlaps when its text
or title contains, anywhere and whatever its own sentence cuts, the first ``PREFIX_WORDS`` words
of such a sentence (the whole sentence when it is shorter). Matching whole sentence openings, not
any n-gram, keeps stock phrases ("in the case of the") from firing while a copied sentence, or a
record that quotes one, is caught.
"""
from __future__ import annotations

import json
import re
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from alignir.encoders.train.corpus_text import norm_words
from alignir.encoders.train.unsupervised import CorpusDoc
from alignir.errors import CorpusOverlapError, InvalidInputError

__all__ = ["OverlapGuard", "Overlap", "MIN_WORDS", "ANCHOR_WORDS", "PREFIX_WORDS"]

#: collection sentences shorter than this are not indexed (too likely to recur by chance)
MIN_WORDS = 8
#: the words a sentence is looked up by
ANCHOR_WORDS = 8
#: the words of a sentence's opening that must all be found (fewer when the sentence is shorter)
PREFIX_WORDS = 16
#: collection sentences end at . ! ? ; and white space, whatever follows (Cranfield and MED are lower case)
_SPLIT = re.compile(r"(?<=[.!?;])\s+")


@dataclass(frozen=True)
class Overlap:
    record: str
    collection: str
    sentence: str


def _collection_texts(folder: Path) -> Iterable[str]:
    for name, keys in (("corpus.jsonl", ("title", "text")), ("queries.jsonl", ("text",))):
        f = folder / name
        if not f.is_file():
            continue
        with open(f, encoding="utf-8") as fh:
            for line in fh:
                if line.strip():
                    row = json.loads(line)
                    yield from (row[k] for k in keys if isinstance(row.get(k), str))


class OverlapGuard:
    """Sentence openings of evaluation collections, and the check of records against them."""

    def __init__(self) -> None:
        self._anchors: dict[tuple[str, ...], list[tuple[tuple[str, ...], str, str]]] = defaultdict(list)
        self.collections: dict[str, int] = {}

    def add(self, collection: str, texts: Iterable[str]) -> int:
        """Index the sentences of ``texts`` under ``collection``; returns how many were indexed."""
        n = 0
        for text in texts:
            for s in _SPLIT.split(text):
                w = norm_words(s)
                if len(w) >= MIN_WORDS:
                    self._anchors[tuple(w[:ANCHOR_WORDS])].append((tuple(w[:PREFIX_WORDS]), collection, s))
                    n += 1
        self.collections[collection] = self.collections.get(collection, 0) + n
        return n

    @classmethod
    def from_datasets(cls, root: str | Path) -> "OverlapGuard":
        """A guard over every BEIR folder (a folder holding ``corpus.jsonl``) at or below ``root``."""
        root = Path(root)
        folders = sorted({f.parent for f in root.rglob("corpus.jsonl")})
        if not folders:
            raise InvalidInputError(f"{root}: no evaluation collection (no corpus.jsonl below it) to guard against")
        guard = cls()
        for folder in folders:
            guard.add(folder.relative_to(root).as_posix() if folder != root else folder.name, _collection_texts(folder))
        return guard

    def find(self, doc: CorpusDoc) -> Overlap | None:
        """The first collection sentence whose opening ``doc`` (title or text) contains, else None."""
        for text in (doc.text, doc.title):
            w = norm_words(text)
            for i in range(len(w) - ANCHOR_WORDS + 1):
                for prefix, collection, sentence in self._anchors.get(tuple(w[i:i + ANCHOR_WORDS]), ()):
                    if tuple(w[i:i + len(prefix)]) == prefix:
                        return Overlap(doc.id, collection, sentence)
        return None

    def check(self, docs: Iterable[CorpusDoc], source: str) -> None:
        """Raise :class:`CorpusOverlapError` naming the records of ``docs`` that contain a sentence
        of an evaluation collection."""
        found = [o for d in docs if (o := self.find(d)) is not None]
        if found:
            raise CorpusOverlapError(source, [(o.record, o.collection, o.sentence) for o in found])

    def describe(self) -> dict:
        return {"collections": dict(self.collections), "min_words": MIN_WORDS, "anchor_words": ANCHOR_WORDS,
                "prefix_words": PREFIX_WORDS}
