"""One pass over a document stream, batch by batch: what a build needs from the corpus.

Each batch of documents (retrieval.sources.DocumentStream) is split into passage rows where
long (retrieval/passages.py), encoded (dense vectors h, through the embedding cache) and
appended to a row spool on disk, analysed for the BM25 leg (only its term counts are kept,
retrieval.bm25.LexicalBuilder) and, when the texts are needed again, appended to a text spool
(index/spool.py). Then the batch is dropped: memory holds one batch of texts plus what the
index keeps anyway (ids, passage map, term counts, the rows' memory map), never the corpus.

What needs every document (the PC1 fit and the projection onto the vocabulary, the dense
centring, BM25's N / df / avgdl, the calibration's pseudo-queries) is done afterwards from the
spools and the accumulated counts (retrieval/indexer.py).
"""
from __future__ import annotations

import logging
from array import array
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from alignir.errors import InvalidInputError
from alignir.index.spool import RowSpool, TextSpool
from alignir.retrieval.beir import Skipped
from alignir.retrieval.config import LexicalConfig, PassageConfig

__all__ = ["DEFAULT_BATCH_DOCS", "Ingested", "PassagePlanner", "ingest"]

log = logging.getLogger(__name__)

#: documents read, encoded and analysed at a time by a build (one part of the embedding cache
#: beside a GPU; tens of MB of text for ordinary documents)
DEFAULT_BATCH_DOCS = 8192
#: the passage-plan counts summed over batches (the other keys of a plan's stats are settings)
_SUMMED = ("documents", "long_documents", "truncated_tokens", "rows", "split_documents", "passage_tokens")


@dataclass
class Ingested:
    """What one pass over the documents left: their ids (doc-number order), the encoder's rows
    (a read-only memory map [rows, d]; [docs, 0] without a model), the passage map (None: one
    row per document) and its report, the BM25 leg (None when not built), the text spool
    (None when the texts were not kept) and the skipped records."""

    doc_ids: list[str]
    rows: np.ndarray
    pmap: Any = None
    passage_stats: dict[str, Any] = field(default_factory=dict)
    lexical: Any = None
    texts: TextSpool | None = None
    skipped: list[Skipped] = field(default_factory=list)


class PassagePlanner:
    """Plans the passage rows of documents batch after batch (retrieval.passages.plan_passages
    per batch, the counts and spans accumulated), as one plan over the whole corpus would."""

    def __init__(self, cfg: PassageConfig, embedder: Any) -> None:
        self.budget = embedder.text_budget("document") if hasattr(embedder, "text_budget") else None
        self.window = cfg.window or self.budget
        self.tokenizer = embedder.tokenizer
        #: the texts as the encoder reads them (encoders.text_form): tokens are counted on those
        self.read = getattr(embedder, "read_texts", None)
        self.stride = cfg.stride
        if self.window is None:  # an encoder without a known window: nothing to split by
            if cfg.split == "on":
                raise InvalidInputError("this encoder has no known text budget: give the passage window "
                                        "(--passages WINDOW)")
            self.window, self.split = 1, "off"
        else:
            self.split = cfg.split
        self.counts = array("q")
        self.starts = array("q")
        self.ends = array("q")
        self.stats: dict[str, Any] = {}

    def plan(self, texts: list[str]) -> Any:
        """The plan of the next documents (its ``texts`` are the rows to encode)."""
        from alignir.retrieval.passages import plan_passages

        plan = plan_passages(texts, self.tokenizer, self.split, self.window, self.stride, budget=self.budget,
                             read=self.read)
        self.counts.extend(plan.counts)
        self.starts.extend(plan.starts)
        self.ends.extend(plan.ends)
        if not self.stats:
            self.stats = dict(plan.stats)
        else:
            for key in _SUMMED:
                self.stats[key] += plan.stats[key]
        self.stats["token_factor"] = round(self.stats["passage_tokens"] / max(1, self.stats["truncated_tokens"]), 4)
        return plan

    @property
    def split_any(self) -> bool:
        """Whether some document became several rows."""
        return bool(self.stats) and self.stats["rows"] > self.stats["documents"]

    def finish(self, stage: Callable[[str], None]) -> Any:
        """The passage map of every document planned (None when none was split), reported
        through ``stage`` when documents were split."""
        from alignir.index.passages import PassageMap

        st = self.stats
        if not self.split_any:
            if self.split != "off" and st.get("long_documents", 0) == 0:
                log.info("no document exceeds the %d-token window: one row per document", self.window)
            return None
        reads = ("the encoder's window" if self.window == self.budget
                 else f"the window (the encoder reads {self.budget})")
        stage(f"passages: {st['split_documents']} of {st['documents']} documents exceed {reads} of {self.window} "
              f"tokens and are split (stride {st['stride']}): {st['documents']} documents -> {st['rows']} "
              f"passages, {st['token_factor']:.2f}x the tokens encoded (--passages off to truncate)")
        return PassageMap.from_counts(np.frombuffer(self.counts, dtype=np.int64),
                                      np.frombuffer(self.starts, dtype=np.int64),
                                      np.frombuffer(self.ends, dtype=np.int64))


def ingest(stream: Any, folder: Path, *, encoder: Any = None, passages: PassageConfig | None = None,
           lexical: LexicalConfig | None = None, keep_texts: bool = False, batch_size: int = DEFAULT_BATCH_DOCS,
           progress: bool = False, stage: Callable[[str], None] = log.info, word_forms: Any = None) -> Ingested:
    """Read ``stream`` (a retrieval.sources.DocumentStream) once, ``batch_size`` documents at a
    time, spooling into ``folder``: rows encoded by ``encoder`` (a retrieval.encoder.Encoder;
    None: no model, no rows), long documents split by ``passages`` (default PassageConfig()),
    the BM25 leg of ``lexical`` (None: none), the texts when ``keep_texts``; the forms of the
    documents' words are counted into ``word_forms`` (an encoders.word_forms.WordForms; None:
    not counted)."""
    from alignir.retrieval.bm25 import LexicalBuilder

    planner = PassagePlanner(passages or PassageConfig(), encoder.embedder) if encoder is not None else None
    rows = RowSpool(folder / "rows.f32") if encoder is not None else None
    texts = TextSpool(folder / "texts.bin") if keep_texts else None
    bm25 = (LexicalBuilder(k1=lexical.k1, b=lexical.b, stem=lexical.stem, stopwords=lexical.stopwords)
            if lexical is not None else None)
    doc_ids: list[str] = []
    try:
        for number, batch in enumerate(stream.batches(batch_size), start=1):
            contents = [doc.contents for _, doc in batch]
            doc_ids.extend(doc_id for doc_id, _ in batch)
            if texts is not None:
                for _, doc in batch:
                    texts.append(doc.title, doc.text)
            if bm25 is not None:
                bm25.add(contents)
            if word_forms is not None:
                word_forms.add_all(t for _, doc in batch for t in (doc.title, doc.text))
            if encoder is not None:
                plan = planner.plan(contents)  # type: ignore[union-attr]
                rows.append(encoder.dense(plan.texts, "document", progress=progress))  # type: ignore[union-attr]
            log.info("batch %d: %d documents read", number, len(doc_ids))
            del batch, contents
    except BaseException:
        if texts is not None:
            texts.close()
        raise
    finally:
        if rows is not None:
            rows.close()
    out = Ingested(doc_ids, np.zeros((len(doc_ids), 0), dtype=np.float32), texts=texts, skipped=stream.skipped)
    if encoder is not None:
        out.rows = rows.array(encoder.dim)  # type: ignore[union-attr]
        out.pmap = planner.finish(stage)  # type: ignore[union-attr]
        out.passage_stats = planner.stats  # type: ignore[union-attr]
    if bm25 is not None:
        stage("building the lexical leg (BM25)")
        out.lexical = bm25.finish()
    return out
