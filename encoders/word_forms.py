"""The forms in which a corpus writes its words, to read a query in capitals as the corpus would.

``text_form="auto"`` (encoders.text_form) reads a run of capitals in sentence case, so a query
in capitals loses the case of its acronyms and names: "SIDS", "PrP", "Caenorhabditis" reach the
LLM as "sids", "prp", "caenorhabditis", which a cased tokenizer reads as other, rarer tokens than
the natural-case documents hold. An index keeps how its own corpus writes each word
(:class:`WordForms`), and the searcher reads each word of a query's run of capitals in the form
the corpus uses most often. On SciFact's claims in capitals this restores 0.971 of the words'
case against the fold's 0.896 (benchmarks/quality/case_lexicon_probe.py).

What is counted: each word (a run of letters with at least one cased letter, at most
:data:`MAX_LETTERS` letters) of a title or text written in natural case, outside runs of
capitals and not at a sentence start, where case says nothing of the word. A text is in natural
case when fewer than half of its words of two letters or more begin with a capital, which leaves
out texts in capitals and in Title Case. The counts are kept per form, so that the counts of two
batches of documents add up (``alignir add``); the most frequent form of a word wins, lower case
on a tie.

In the index folder: ``extra/word_forms.npy`` (the forms, UTF-8, one per line, as uint8) and
``extra/word_form_counts.npy`` (int64, one count per form).
"""
from __future__ import annotations

from typing import Iterable, Mapping

import numpy as np

from alignir.encoders.text_form import WORD, capital_runs, sentence_start
from alignir.errors import CorruptIndexError

__all__ = ["MAX_LETTERS", "ARRAYS", "WordForms", "natural_case"]

#: longer words (sequences, identifiers run together) are not counted
MAX_LETTERS = 40
#: the names of the index folder's extra arrays that hold the counts
ARRAYS = ("word_forms", "word_form_counts")


def natural_case(words: list[str]) -> bool:
    """Whether a text of these words is written in natural case: fewer than half of its words
    of two letters or more begin with a capital (not in capitals, not in Title Case)."""
    long = [w for w in words if len(w) >= 2]
    return 2 * sum(w[0].isupper() for w in long) < len(long)


class WordForms:
    """Counts of the forms (letter case) of a corpus's words; :meth:`form` is the hook
    ``encoders.text_form.fold_capitals(word_form=)`` takes."""

    def __init__(self, counts: Mapping[str, int] | None = None) -> None:
        #: form as written -> how often the corpus writes it so
        self.counts: dict[str, int] = dict(counts or {})
        self._best: dict[str, str] | None = None

    def __len__(self) -> int:
        return len(self.counts)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, WordForms) and self.counts == other.counts

    def __repr__(self) -> str:
        return f"WordForms({len(self.counts)} forms)"

    # ------------------------------------------------------------------ counting
    def add(self, text: str) -> None:
        """Count the words of one title or text (see the module docstring for which)."""
        matches = list(WORD.finditer(text))
        if not matches or not natural_case([m.group() for m in matches]):
            return
        runs = capital_runs(text)
        counts = self.counts
        for m in matches:
            word, a = m.group(), m.start()
            if len(word) > MAX_LETTERS or word.lower() == word.upper():
                continue
            if any(s <= a < e for s, e in runs) or sentence_start(text, a):
                continue
            counts[word] = counts.get(word, 0) + 1
        self._best = None

    def add_all(self, texts: Iterable[str]) -> "WordForms":
        """:meth:`add` each text; returns self."""
        for text in texts:
            self.add(text)
        return self

    # ------------------------------------------------------------------ reading
    def form(self, word: str) -> str | None:
        """The form the corpus writes ``word`` in most often (matched without case), or None
        when it writes it in lower case most often or never."""
        return self.most_frequent().get(word.lower())

    def most_frequent(self) -> dict[str, str]:
        """Lower-cased word -> its most frequent form, for the words whose most frequent form is
        not lower case (a tie with lower case goes to lower case; between other forms, to the
        first in code-point order, so that the result does not depend on the counting order)."""
        if self._best is None:
            self._best = self._count_best()
        return self._best

    def _count_best(self) -> dict[str, str]:
        best: dict[str, tuple[tuple[int, bool], str]] = {}
        for form in sorted(self.counts):
            key = form.lower()
            rank = (self.counts[form], form == key)
            held = best.get(key)
            if held is None or rank > held[0]:
                best[key] = (rank, form)
        return {key: form for key, (_, form) in best.items() if form != key}

    def summary(self) -> dict[str, int]:
        """``{"forms", "words_not_lower"}``: the forms counted, and the words read in a form
        other than lower case (what the index manifest records and ``alignir info`` shows)."""
        return {"forms": len(self.counts), "words_not_lower": len(self.most_frequent())}

    # ------------------------------------------------------------------ the index folder
    def to_arrays(self) -> dict[str, np.ndarray]:
        """The counts as the index folder's extra arrays (:data:`ARRAYS`; no pickle)."""
        forms = sorted(self.counts)
        blob = "\n".join(forms).encode("utf-8")
        return {ARRAYS[0]: np.frombuffer(blob, dtype=np.uint8).copy(),
                ARRAYS[1]: np.asarray([self.counts[f] for f in forms], dtype=np.int64)}

    @classmethod
    def from_arrays(cls, extra: Mapping[str, np.ndarray]) -> "WordForms | None":
        """The counts an index folder holds in ``extra`` (None: an index without them)."""
        if ARRAYS[0] not in extra or ARRAYS[1] not in extra:
            return None
        blob, counts = np.asarray(extra[ARRAYS[0]]), np.asarray(extra[ARRAYS[1]])
        if blob.dtype != np.uint8 or blob.ndim != 1 or counts.ndim != 1 or counts.dtype.kind not in "iu":
            raise CorruptIndexError(f"the word-form arrays have the wrong types: {blob.dtype}{blob.shape}, "
                                    f"{counts.dtype}{counts.shape}")
        try:
            text = blob.tobytes().decode("utf-8")
        except UnicodeDecodeError as e:
            raise CorruptIndexError(f"the word forms are not UTF-8: {e}") from None
        forms = text.split("\n") if text else []
        if len(forms) != len(counts):
            raise CorruptIndexError(f"{len(forms)} word forms but {len(counts)} counts")
        return cls(dict(zip(forms, counts.tolist())))
