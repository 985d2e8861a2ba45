"""The form in which the LLM reads a text: runs of capitals in sentence case (``text_form``).

Why: a cased LLM tokenizer sees "MICROWAVE" and "microwave" as unrelated pieces (SmolLM2's BPE
reads " MICROWAVE" as ``ĠM`` ``IC`` ``ROW`` ``AVE`` and " microwave" as the one token
``Ġmicrowave``), so a document or a query written in capitals reaches the transformer as a
different, rarer token sequence than the same words in natural case, and both LLM legs (dense h
and the aligned tokens read from it) lose what they learnt about the words. Uncased encoders (all-MiniLM-L6-v2) and BM25 lower-case first and do
not care. Collections in capitals are common (old archives, catalogues, logs, legal and medical
records, OCR).

``text_form``:

- ``"auto"`` (new encoders): every *run of capitals* is read in sentence case. A run is a
  maximal sequence of words written in capitals (a word: letters only; in capitals: every cased
  letter upper case) with no lower-case letter between them, of at least :data:`RUN_WORDS` words
  and :data:`RUN_LETTERS` letters. Its letters are lower-cased except the first letter of a
  sentence (at the start of the text, after ``. ! ?`` or after a blank line), so
  ``"GAS DYNAMICS OF HYPERSONIC FLOW. The body cites NASA data."`` is read as
  ``"Gas dynamics of hypersonic flow. The body cites NASA data."``. Acronyms ("NASA"), a pair of
  capitalised words ("NEW YORK") and Title Case pass unchanged, so natural text is read exactly
  as given.
- ``"off"``: the text as given (what an index built before the option does).

Only letter case changes: the folded text has the same length and every character at the same
offset, so spans, truncation points and passage boundaries found on it hold for the original
text. A capital whose ``str.lower()`` is longer than one character ("İ" -> "i̇") becomes its
first character ("i").

The fold is what the transformer reads only: BM25, the stored text, displays and explanations
keep the original text.
"""
from __future__ import annotations

import re
from typing import Callable, Sequence

from alignir.errors import InvalidInputError

__all__ = ["TEXT_FORMS", "DEFAULT_TEXT_FORM", "RUN_WORDS", "RUN_LETTERS", "check_text_form", "WORD", "capital_runs",
           "sentence_start", "WordForm", "fold_capitals", "read_text", "read_texts", "lower_without_punctuation"]

#: the accepted values of the ``text_form`` embedder option
TEXT_FORMS = ("auto", "off")
#: what a new encoder gets (encoders.shipped.resolve_shipped); an index that records none reads "off"
DEFAULT_TEXT_FORM = "auto"
#: the fewest words and letters a run of capitals has
RUN_WORDS = 3
RUN_LETTERS = 8

#: a word of the text: a run of letters (digits, underscores and other characters separate words)
WORD = re.compile(r"[^\W\d_]+")
#: what may stand between a sentence end and the sentence's first letter
_OPENERS = frozenset("\"'([{«“‘")
_SENTENCE_ENDS = frozenset(".!?")
_PUNCT = re.compile(r"[^\w\s]+")
_SPACES = re.compile(r"[ \t]+")


def check_text_form(value: object) -> str:
    """``value`` if it is one of :data:`TEXT_FORMS`, else InvalidInputError."""
    if value not in TEXT_FORMS:
        raise InvalidInputError(f"text_form must be one of {', '.join(TEXT_FORMS)}, got {value!r}")
    return str(value)


def _is_capitals(word: str) -> bool:
    return word.isupper()


def capital_runs(text: str) -> list[tuple[int, int]]:
    """Character spans [start, end) of the runs of capitals of ``text`` (see the module docstring),
    from the first letter of the run's first word to the last letter of its last word."""
    runs: list[tuple[int, int]] = []
    words: list[tuple[int, int]] = []

    def close() -> None:
        if len(words) >= RUN_WORDS and sum(b - a for a, b in words) >= RUN_LETTERS:
            runs.append((words[0][0], words[-1][1]))
        words.clear()

    for m in WORD.finditer(text):
        if _is_capitals(m.group()):
            words.append(m.span())
        else:
            close()
    close()
    return runs


def _lower(ch: str) -> str:
    """One lower-case character for ``ch`` (its first when ``str.lower`` gives more: "İ" -> "i")."""
    low = ch.lower()
    return low if len(low) == 1 else low[0]


def sentence_start(text: str, pos: int) -> bool:
    """Whether the letter at ``pos`` begins a sentence: only white space and opening quotes or
    brackets stand between it and the start of the text, a ``. ! ?`` or a blank line."""
    newlines = 0
    i = pos - 1
    while i >= 0:
        ch = text[i]
        if ch == "\n":
            newlines += 1
            if newlines >= 2:
                return True
        elif not (ch.isspace() or ch in _OPENERS):
            return ch in _SENTENCE_ENDS
        i -= 1
    return True


def _upper_first(word: str) -> str:
    """``word`` with its first letter upper case (one character: "ß" stays as it is)."""
    up = word[:1].upper()
    return (up if len(up) == 1 else word[:1]) + word[1:]


#: the form a reader gives one word of a run of capitals (its letters as written; None: no form
#: known, the word is folded): encoders.word_forms.WordForms.form
WordForm = Callable[[str], "str | None"]


def fold_capitals(text: str, word_form: WordForm | None = None) -> str:
    """``text`` with its runs of capitals in sentence case (``text_form="auto"``); the same length,
    only letter case changed.

    ``word_form``: gives a word of a run the form a corpus writes it in (e.g. "SIDS", "PrP",
    "Caenorhabditis": encoders.word_forms); a word it knows no form for, or whose form has
    another length, is folded as without it. A form at a sentence start gets a capital first
    letter."""
    runs = capital_runs(text)
    if not runs:
        return text
    out = list(text)
    for start, end in runs:
        for m in WORD.finditer(text, start, end):
            a, b = m.span()
            first = sentence_start(text, a)
            form = word_form(m.group()) if word_form is not None else None
            if form is not None and len(form) == b - a:
                out[a:b] = _upper_first(form) if first else form
                continue
            for i in range(a + 1 if first else a, b):
                out[i] = _lower(text[i])
    return "".join(out)


def read_text(text: str, text_form: str, word_form: WordForm | None = None) -> str:
    """What the LLM reads of ``text`` under ``text_form`` (``word_form``: see :func:`fold_capitals`)."""
    return fold_capitals(text, word_form) if text_form == "auto" else text


def read_texts(texts: Sequence[str], text_form: str, word_form: WordForm | None = None) -> list[str]:
    """:func:`read_text` of each text."""
    if text_form == "off":
        return list(texts)
    return [fold_capitals(t, word_form) for t in texts]


def lower_without_punctuation(text: str) -> str:
    """``text`` as some collections store it: lower case, punctuation replaced by a space, runs of
    spaces made one (the text-form benchmark's ``lower`` setting and the training variants of
    encoders.train.text_variants). ``text_form`` does not undo it: there is no case to restore."""
    return _SPACES.sub(" ", _PUNCT.sub(" ", text.lower())).strip()
