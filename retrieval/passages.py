"""Split documents into overlapping passages of the encoder's tokens (issue 17 item 1, groundwork).

``WINDOW[:STRIDE]`` (``build-index --passages``): passages of at most WINDOW tokens of the
encoder's tokenizer, a new one starting every STRIDE tokens (default WINDOW // 2, the half
overlap of Dai & Callan, "Deeper Text Understanding for IR with Contextual Neural Language
Modeling", SIGIR 2019, §3: 150-word windows, stride 75), until the document's last token is
covered. Sentence-aware where cheap: a passage that would end inside the text is cut back to
the last sentence end (``. ! ?`` or a newline followed by white space) in its final quarter,
when there is one, so a sentence is not split between two passages (the next passage starts
STRIDE tokens after the previous start regardless, so nothing is skipped). A document that
fits in one window stays one passage, its text unchanged.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from alignir.errors import InvalidInputError

__all__ = ["Passage", "parse_passages", "split_passages"]

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
                   sentence_aware: bool = True) -> list[Passage]:
    """Passages of ``text`` (see the module docstring). ``tokenizer``: a Hugging Face fast
    tokenizer (its offset mapping locates tokens in the text); special tokens are not counted."""
    if window < 1 or not 1 <= stride <= window:
        raise InvalidInputError(f"window must be >= 1 and stride in [1, window], got {window}, {stride}")
    enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    spans = [(a, b) for a, b in enc["offset_mapping"] if b > a]
    if len(spans) <= window:
        return [Passage(0, len(text), text)]
    out: list[Passage] = []
    for first in range(0, len(spans), stride):
        last = min(first + window, len(spans)) - 1
        start, end = spans[first][0], spans[last][1]
        if sentence_aware and last < len(spans) - 1:
            cut_from = spans[first + (3 * window) // 4][0] if first + (3 * window) // 4 <= last else start
            ends = [m.end() for m in _SENTENCE_END.finditer(text, cut_from, end)]
            if ends:
                end = ends[-1]
        out.append(Passage(start, end, text[start:end]))
        if last == len(spans) - 1:
            break
    return out
