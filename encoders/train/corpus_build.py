"""From a source's raw records to a BEIR-style corpus folder for unlabelled training pairs
(``--data-mix title,crop --corpus DIR``): cut, filter, deduplicate, cap, check against the
evaluation collections, and write ``corpus.jsonl`` + ``SOURCE.json`` in one atomic step."""
from __future__ import annotations

import hashlib
import json
import shutil
import statistics
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from alignir.encoders.train.corpus_overlap import Overlap, OverlapGuard
from alignir.encoders.train.corpus_text import clean_space, cut_words, norm_words, word_count
from alignir.encoders.train.unsupervised import CorpusDoc
from alignir.errors import InvalidInputError
from alignir.io import atomic_write_json, atomic_write_text, replace_dir

__all__ = ["Selection", "select_records", "write_corpus", "DEFAULT_MAX_DOCS", "DEFAULT_MAX_WORDS", "DEFAULT_MIN_WORDS"]

DEFAULT_MAX_DOCS = 20_000
DEFAULT_MAX_WORDS = 300
DEFAULT_MIN_WORDS = 5
#: titles longer than this are not titles (a run-on NAME line, a sentence): the record is dropped
MAX_TITLE_WORDS = 32
#: duplicate texts are detected on their first words (variants that differ only further on count as one)
DUPLICATE_PREFIX_WORDS = 40


@dataclass
class Selection:
    """The kept records and what happened to the others."""

    docs: list[CorpusDoc]
    counts: dict[str, int]
    rules: dict
    overlaps: list[Overlap]


def _rank(doc_id: str) -> str:
    return hashlib.sha1(doc_id.encode("utf-8")).hexdigest()


def select_records(records: Iterable[CorpusDoc], max_docs: int = DEFAULT_MAX_DOCS, max_words: int = DEFAULT_MAX_WORDS,
                   min_words: int = DEFAULT_MIN_WORDS, drop_overlapping: OverlapGuard | None = None) -> Selection:
    """Clean and choose records, in this order:

    1. white space collapsed; the text cut to its leading whole sentences within ``max_words``
       words (a longer first sentence cut at ``max_words`` words);
    2. dropped: no title, a title of more than ``MAX_TITLE_WORDS`` words, a text of fewer than
       ``min_words`` words, a text equal to its title; with ``drop_overlapping``, a record that
       contains a sentence of an evaluation collection (listed in ``Selection.overlaps``;
       without it such a record stays, and :func:`write_corpus` refuses the corpus);
    3. dropped as duplicates: a record whose title, or whose text's first ``DUPLICATE_PREFIX_WORDS``
       words, an earlier record has (case, punctuation and spacing ignored), or a repeated id;
    4. capped: past ``max_docs``, the ``max_docs`` records with the smallest sha1 of their id (a
       fixed spread over the whole source), written in source order.
    """
    if max_docs < 1 or max_words < 1 or min_words < 1:
        raise InvalidInputError(f"max_docs, max_words and min_words must be >= 1, got {max_docs}, {max_words}, {min_words}")
    counts: Counter[str] = Counter()
    kept: list[CorpusDoc] = []
    ids: set[str] = set()
    titles: set[tuple[str, ...]] = set()
    texts: set[tuple[str, ...]] = set()
    overlaps: list[Overlap] = []
    for rec in records:
        counts["read"] += 1
        title = clean_space(rec.title)
        text = cut_words(rec.text, max_words)
        if not title or word_count(title) > MAX_TITLE_WORDS:
            counts["dropped_title"] += 1
            continue
        if word_count(text) < min_words or norm_words(text) == norm_words(title):
            counts["dropped_short"] += 1
            continue
        if drop_overlapping is not None and (hit := drop_overlapping.find(CorpusDoc(rec.id, title, text))):
            counts["dropped_overlapping"] += 1
            overlaps.append(hit)
            continue
        t_key, x_key = tuple(norm_words(title)), tuple(norm_words(text)[:DUPLICATE_PREFIX_WORDS])
        if rec.id in ids or t_key in titles or x_key in texts:
            counts["dropped_duplicate"] += 1
            continue
        ids.add(rec.id)
        titles.add(t_key)
        texts.add(x_key)
        kept.append(CorpusDoc(rec.id, title, text))
    if len(kept) > max_docs:
        chosen = set(sorted(range(len(kept)), key=lambda i: _rank(kept[i].id))[:max_docs])
        counts["dropped_cap"] = len(kept) - max_docs
        kept = [d for i, d in enumerate(kept) if i in chosen]
    counts["kept"] = len(kept)
    rules = {"max_docs": max_docs, "max_words": max_words, "min_words": min_words, "max_title_words": MAX_TITLE_WORDS,
             "duplicates": f"same title, or same first {DUPLICATE_PREFIX_WORDS} words of text (case and punctuation "
                           "ignored): the first kept",
             "cap": "the max_docs records with the smallest sha1(_id), in source order",
             "cut": "leading whole sentences within max_words words"}
    return Selection(kept, dict(counts), rules, overlaps)


def write_corpus(folder: str | Path, selection: Selection, info: dict, guard: OverlapGuard) -> dict:
    """Check ``selection`` against ``guard`` (raises :class:`alignir.errors.CorpusOverlapError`,
    writing nothing) and write ``folder`` as a whole: ``corpus.jsonl`` (``_id``, ``title``,
    ``text``) and ``SOURCE.json`` (``info`` + counts, rules, median words, the overlap check).
    Returns what ``SOURCE.json`` holds."""
    if not selection.docs:
        raise InvalidInputError(f"{info.get('name', folder)}: no record left to write")
    guard.check(selection.docs, str(info.get("name", folder)))
    folder = Path(folder)
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = folder.parent / f".{folder.name}.tmp"
    if tmp.exists():
        shutil.rmtree(tmp)  # left by a killed run
    tmp.mkdir()
    lines = "".join(json.dumps({"_id": d.id, "title": d.title, "text": d.text}, ensure_ascii=False) + "\n"
                    for d in selection.docs)
    atomic_write_text(tmp / "corpus.jsonl", lines)
    source = {**info, "records": len(selection.docs),
              "median_words": statistics.median(word_count(d.text) for d in selection.docs),
              "median_title_words": statistics.median(word_count(d.title) for d in selection.docs),
              "counts": selection.counts, "selection": selection.rules,
              "overlap_check": {**guard.describe(), "result": "no record contains a sentence of these collections",
                                "dropped": [vars(o) for o in selection.overlaps]},
              "corpus_sha256": hashlib.sha256(lines.encode("utf-8")).hexdigest()}
    atomic_write_json(tmp / "SOURCE.json", source)
    replace_dir(tmp, folder, overwrite=True)
    return source
