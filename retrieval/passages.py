"""Split documents into overlapping passages of the encoder's tokens.

``WINDOW[:STRIDE]`` (``build-index --passages``): passages of at most WINDOW tokens of the
encoder's tokenizer, a new one starting every STRIDE tokens (default WINDOW // 2, the half
overlap of Dai & Callan, "Deeper Text Understanding for IR with Contextual Neural Language
Modeling", SIGIR 2019, §3: 150-word windows, stride 75), until the document's last token is
covered. Sentence-aware where cheap: a passage that would end inside the text is cut back to
the last sentence end (``. ! ?`` or a newline followed by white space) in its final quarter
and not before the next passage's start, when there is one, so a sentence is not split between
two passages (the next passage starts STRIDE tokens after the previous start regardless, so
nothing is skipped; without overlap, STRIDE = WINDOW, nothing is cut). A document that
fits in one window stays one passage, its text unchanged.

Tokens are counted on the text as the encoder reads it (``read``: ``Embedder.read_texts``, runs
of capitals in sentence case under ``text_form="auto"``, encoders.text_form), which has the
original's length and offsets: the passages are spans of the original text, cut where the
encoder's tokens fall.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable

from alignir.errors import InvalidInputError

__all__ = ["Passage", "PassagePlan", "parse_passages", "plan_passages", "split_passages"]

_SENTENCE_END = re.compile(r"[.!?](?=\s)|\n(?=\s*\S)")


@dataclass(frozen=True)
class Passage:
    """One passage: character span [start, end) of its document, and its text."""

    start: int
    end: int
    text: str


def parse_passages(spec: str) -> tuple[int, int]:
    """``"256"`` -> (256, 128); ``"256:64"`` -> (256, 64). STRIDE must be in [1, WINDOW]."""
    window_s, _, stride_s = str(spec).strip().partition(":")
    try:
        window = int(window_s)
        stride = int(stride_s) if stride_s else max(1, window // 2)
    except ValueError:
        raise InvalidInputError(f"--passages wants WINDOW[:STRIDE] in tokens, e.g. 256 or 256:128, "
                                f"got {spec!r}") from None
    if window < 1 or not 1 <= stride <= window:
        raise InvalidInputError(f"--passages {spec!r}: WINDOW must be >= 1 and STRIDE in [1, WINDOW]")
    return window, stride


def split_passages(text: str, tokenizer: Any, window: int, stride: int,
                   sentence_aware: bool = True, read: str | None = None) -> list[Passage]:
    """Passages of ``text`` (see the module docstring). ``tokenizer``: a Hugging Face fast
    tokenizer (its offset mapping locates tokens in the text); special tokens are not counted.
    ``read``: the text as the encoder reads it (same length), whose tokens are counted."""
    if window < 1 or not 1 <= stride <= window:
        raise InvalidInputError(f"window must be >= 1 and stride in [1, window], got {window}, {stride}")
    if read is not None and len(read) != len(text):
        raise InvalidInputError(f"the text as read has {len(read)} characters, the text {len(text)}")
    enc = tokenizer(text if read is None else read, add_special_tokens=False, return_offsets_mapping=True)
    spans = [(a, b) for a, b in enc["offset_mapping"] if b > a]
    if len(spans) <= window:
        return [Passage(0, len(text), text)]
    out: list[Passage] = []
    for first in range(0, len(spans), stride):
        last = min(first + window, len(spans)) - 1
        start, end = spans[first][0], spans[last][1]
        if sentence_aware and last < len(spans) - 1:
            cut_from = spans[first + (3 * window) // 4][0] if first + (3 * window) // 4 <= last else start
            # never before the next passage's start: the text in between would be in no passage
            cut_from = max(cut_from, spans[first + stride][0])
            ends = [m.end() for m in _SENTENCE_END.finditer(text, cut_from, end)]
            if ends:
                end = ends[-1]
        out.append(Passage(start, end, text[start:end]))
        if last == len(spans) - 1:
            break
    return out


@dataclass(frozen=True)
class PassagePlan:
    """What to encode for a corpus: ``texts`` (one per row), ``counts`` (rows per document),
    the rows' character spans in their documents, and the build report (``stats``)."""

    texts: list[str]
    counts: list[int]
    starts: list[int]
    ends: list[int]
    stats: dict[str, Any]

    @property
    def split(self) -> bool:
        """Whether some document became several rows (else the index needs no passage map)."""
        return len(self.texts) > len(self.counts)


def plan_passages(texts: list[str], tokenizer: Any, split: str, window: int, stride: int | None = None,
                  budget: int | None = None,
                  read: Callable[[list[str]], list[str]] | None = None) -> PassagePlan:
    """Split the documents longer than ``window`` tokens into passages (``split``: "auto" /
    "on"; "off": one row per document). ``budget``: the encoder's text budget (a window above
    it is refused: its passages would be truncated). The report counts the text tokens the
    encoder reads with passages (``passage_tokens``) and without (``truncated_tokens``: each
    document cut at ``budget``), so their ratio is the encode-cost factor of the overlap.
    ``read``: the texts as the encoder reads them (``Embedder.read_texts``); tokens are counted
    on those."""
    if budget is not None and window > budget:
        raise InvalidInputError(f"passage window {window} exceeds the encoder's text budget of {budget} tokens "
                                f"(max length less the prompt): passages would be truncated; use a window "
                                f"<= {budget} or a larger --max-length")
    stride = max(1, window // 2) if stride is None else stride
    if split not in ("auto", "on", "off"):
        raise InvalidInputError(f"split must be auto, on or off, got {split!r}")
    reads = list(texts) if read is None else read(list(texts))
    lengths = [len(ids) for ids in tokenizer(reads, add_special_tokens=False)["input_ids"]] if texts else []
    cap = budget or window
    stats: dict[str, Any] = {"window": window, "stride": stride, "documents": len(texts),
                             "long_documents": sum(n > window for n in lengths),
                             "truncated_tokens": int(sum(min(n, cap) for n in lengths))}
    rows, counts, starts, ends = [], [], [], []
    passage_tokens = 0
    for text, as_read, n in zip(texts, reads, lengths):
        if split == "off" or n <= window:
            rows.append(text)
            counts.append(1)
            starts.append(0)
            ends.append(len(text))
            passage_tokens += min(n, cap)
            continue
        parts = split_passages(text, tokenizer, window, stride, read=as_read)
        rows += [p.text for p in parts]
        counts.append(len(parts))
        starts += [p.start for p in parts]
        ends += [p.end for p in parts]
        passage_tokens += sum(len(ids) for ids in tokenizer([as_read[p.start:p.end] for p in parts],
                                                            add_special_tokens=False)["input_ids"])
    stats.update(rows=len(rows), split_documents=sum(c > 1 for c in counts), passage_tokens=int(passage_tokens),
                 token_factor=round(passage_tokens / max(1, stats["truncated_tokens"]), 4))
    return PassagePlan(rows, counts, starts, ends, stats)
