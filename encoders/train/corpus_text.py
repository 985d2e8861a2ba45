"""Plain-text helpers of the unlabelled corpora (encoders/train/corpus_sources.py): whitespace,
sentences, a word cap cut on sentence boundaries, and the normalised words that duplicate
detection and the overlap guard compare."""
from __future__ import annotations

import re

__all__ = ["clean_space", "sentences", "cut_words", "norm_words", "word_count"]

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
_SPACE = re.compile(r"\s+")
#: a sentence ends at . ! ? (closing quotes or brackets may follow) before white space and an
#: upper-case letter, a digit or an opening quote/bracket
_SENTENCE_END = re.compile(r"(?<=[.!?])[\"'”’)\]]*\s+(?=[\"'“‘(\[]?[A-Z0-9])")
_WORD = re.compile(r"\w+")


def clean_space(text: str) -> str:
    """``text`` without control characters, every run of white space one space, stripped."""
    return _SPACE.sub(" ", _CONTROL.sub(" ", text)).strip()


def sentences(text: str) -> list[str]:
    """The sentences of ``text`` (already one line): cut after . ! ? followed by a capital, a digit
    or an opening quote. Abbreviations followed by a capital (``e.g. Python``) cut too: good
    enough for a word cap."""
    text = clean_space(text)
    if not text:
        return []
    out, start = [], 0
    for m in _SENTENCE_END.finditer(text):
        out.append(text[start:m.end()].strip())
        start = m.end()
    out.append(text[start:].strip())
    return [s for s in out if s]


def word_count(text: str) -> int:
    """Words of ``text`` as white-space separated tokens (the unit of the unsupervised crops)."""
    return len(text.split())


def cut_words(text: str, max_words: int) -> str:
    """The leading whole sentences of ``text`` that fit in ``max_words`` words; a first sentence
    longer than that is cut to its first ``max_words`` words."""
    kept: list[str] = []
    n = 0
    for s in sentences(text):
        w = word_count(s)
        if n + w > max_words:
            break
        kept.append(s)
        n += w
    if not kept:
        return " ".join(clean_space(text).split()[:max_words])
    return " ".join(kept)


def norm_words(text: str) -> list[str]:
    """Lower-cased word characters of ``text`` (punctuation, case and spacing ignored)."""
    return [m.group().lower() for m in _WORD.finditer(text)]
