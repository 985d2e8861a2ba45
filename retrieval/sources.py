"""Where an index's documents come from: a BEIR folder, a corpus .jsonl, a pyarrow table or any
iterable of ``{"_id", "title"?, "text"}`` records, read as a stream.

:class:`DocumentStream` yields the checked documents one at a time (or in batches), so a build
holds one batch of texts, never the corpus: a generator is consumed exactly once, a file is read
line by line, a table one record batch at a time. Its checks are those of
:func:`read_source`, which collects the stream into a :class:`retrieval.beir.Corpus` (for the
callers that want every document at hand: ``add_documents``, ``alignir encode``, exports).

A corpus file is read twice by a stream: a first pass only checks it, so every bad line is
reported at once (as ``read_corpus_jsonl`` does) before anything is encoded; the second pass
yields the documents. Records of an iterable are checked as they come: the first bad one is an
error naming its position (from 1), unless ``skip_bad``.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping

from alignir.errors import CorpusError, InvalidInputError
from alignir.retrieval.beir import Corpus, Document, Skipped, iter_corpus_jsonl

__all__ = ["DocSource", "DocumentStream", "read_source"]

#: what build_index / add_documents read documents from
DocSource = Any  # str | Path | Iterable[Mapping[str, str]] | pyarrow.Table
#: records taken from a pyarrow table at a time
TABLE_CHUNK = 1024


class DocumentStream:
    """The documents of ``source`` as ``(id, Document)`` pairs, checked, in source order.

    Iterable once (a generator source cannot be read twice). ``skipped`` lists what was left
    out: documents with empty title and text, and with ``skip_bad`` the bad records or lines
    (:class:`retrieval.beir.Skipped`, numbered from 1). A source without a document to index
    raises :class:`InvalidInputError` (a corpus file: :class:`CorpusError`) when the stream ends.
    """

    def __init__(self, source: DocSource, skip_bad: bool = False) -> None:
        self.skip_bad = bool(skip_bad)
        self.skipped: list[Skipped] = []
        self.path: Path | None = None
        self._records: Iterable[Any] | None = None
        self._used = False
        if isinstance(source, (str, Path)):
            self.path = corpus_file(source)
        elif isinstance(source, (bytes, Mapping)) or not hasattr(source, "__iter__") and not _is_table(source):
            raise InvalidInputError("documents must be a path, a pyarrow table or an iterable of "
                                    "{'_id', 'title', 'text'} records")
        elif _is_table(source):
            self._records = (row for batch in source.to_batches(max_chunksize=TABLE_CHUNK)
                             for row in batch.to_pylist())
        else:
            self._records = source

    def check(self) -> "DocumentStream":
        """Read a corpus file once without keeping anything, raising every problem at once
        (:class:`CorpusError`) before any work is done on its documents; nothing for records."""
        if self.path is not None:
            problems: list[tuple[int, str]] = []
            empties: list[tuple[int, str]] = []
            found = sum(1 for _ in iter_corpus_jsonl(self.path, problems, empties, "skip")) > 0  # every line
            self._raise_problems(problems, empties, found)
        return self

    def __iter__(self) -> Iterator[tuple[str, Document]]:
        if self._used:
            raise InvalidInputError("a document stream can be read only once")
        self._used = True
        found = False
        for doc in (self._from_file() if self.path is not None else self._from_records()):
            found = True
            yield doc
        if not found and self.path is None:
            first = f" ({self.skipped[0].reason}, ...)" if self.skipped else ""
            raise InvalidInputError("no documents to index" + first)

    def batches(self, size: int) -> Iterator[list[tuple[str, Document]]]:
        """The documents in lists of at most ``size``."""
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise InvalidInputError(f"batch size must be a positive integer, got {size!r}")
        batch: list[tuple[str, Document]] = []
        for doc in self:
            batch.append(doc)
            if len(batch) == size:
                yield batch
                batch = []
        if batch:
            yield batch

    def _from_file(self) -> Iterator[tuple[str, Document]]:
        assert self.path is not None
        problems: list[tuple[int, str]] = []
        empties: list[tuple[int, str]] = []
        found = False
        for doc in iter_corpus_jsonl(self.path, problems, empties, "skip"):
            found = True
            yield doc
        self._raise_problems(problems, empties, found)
        self.skipped = [Skipped(ln, why) for ln, why in sorted(problems + empties)]

    def _raise_problems(self, problems: list[tuple[int, str]], empties: list[tuple[int, str]], found: bool) -> None:
        if problems and not self.skip_bad:
            raise CorpusError(self.path, problems)
        if not found:
            raise CorpusError(self.path, problems + empties + [(0, "corpus is empty: no valid documents")])

    def _from_records(self) -> Iterator[tuple[str, Document]]:
        seen: set[str] = set()
        for i, rec in enumerate(self._records or (), start=1):
            doc_id, doc, why = _check_record(i, rec, seen)
            if doc is not None:
                seen.add(doc_id)
                yield doc_id, doc
                continue
            if doc_id is not None:  # empty title and text: nothing to retrieve it by
                seen.add(doc_id)
                self.skipped.append(Skipped(i, why))
                continue
            if not self.skip_bad:
                raise InvalidInputError(why)
            self.skipped.append(Skipped(i, why))


def _check_record(i: int, rec: Any, seen: set[str]) -> tuple[Any, Document | None, str]:
    """(id, Document, "") for a good record; (id, None, why) for one with empty title and text;
    (None, None, why) for a bad one (``i``: its position, from 1)."""
    if not isinstance(rec, Mapping):
        return None, None, f"record {i} is {type(rec).__name__}, expected a mapping with _id, title, text"
    doc_id, title, text = rec.get("_id"), rec.get("title") or "", rec.get("text")
    if isinstance(doc_id, int) and not isinstance(doc_id, bool):
        doc_id = str(doc_id)
    if not isinstance(doc_id, str) or not doc_id.strip():
        return None, None, f"record {i} has no _id (a non-empty string)"
    if not isinstance(text, str) or not isinstance(title, str):
        return None, None, f"record {i} ({doc_id!r}) needs a string text (and title, when given)"
    if doc_id in seen:
        return None, None, f"record {i} repeats the _id {doc_id!r}"
    if not f"{title} {text}".strip():
        return doc_id, None, f"document {doc_id!r} has empty title and text"
    return doc_id, Document(title=title, text=text), ""


def _is_table(source: Any) -> bool:
    return hasattr(source, "to_batches") and hasattr(source, "column_names")


def corpus_file(source: str | Path) -> Path:
    """The corpus .jsonl of a path: the file itself, or a BEIR folder's corpus.jsonl."""
    p = Path(source)
    if not p.exists():
        raise FileNotFoundError(f"source {p} does not exist (give a BEIR folder or a corpus .jsonl)")
    if p.is_dir():
        corpus = p / "corpus.jsonl"
        if not corpus.is_file():
            raise InvalidInputError(f"{p} is a folder without corpus.jsonl: not a BEIR folder")
        return corpus
    return p


def read_source(source: DocSource, skip_bad: bool = False) -> Corpus:
    """Documents from a BEIR folder (its corpus.jsonl), a corpus .jsonl file, a pyarrow table
    or any iterable of mappings with ``_id``, optional ``title`` and ``text`` (the corpus.jsonl
    fields), all in memory. Documents with empty title and text are skipped and reported
    (``Corpus.skipped``); other bad records are an error naming them, or skipped too with
    ``skip_bad``. A build streams instead (:class:`DocumentStream`)."""
    stream = DocumentStream(source, skip_bad=skip_bad)
    docs = dict(stream)
    return Corpus(docs, skipped=stream.skipped, path=str(stream.path) if stream.path is not None else "")
