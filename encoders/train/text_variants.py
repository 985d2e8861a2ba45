"""Text-form variants of training pairs (``--text-forms SHARE``): a share of the training queries
read with their pairs' texts in another form, the forms collections come in and a cased LLM
reads worst.

A cased tokenizer splits "MICROWAVE" and "microwave" into unrelated pieces, so text in capitals
or lower case without punctuation reaches the transformer as a rarer token sequence than the
same words in natural case. ``text_form="auto"`` (encoders.text_form) reads runs of capitals in
sentence case, which restores most of the case but not the acronyms and names; nothing restores
a corpus stored in lower case without punctuation. Training on such variants asks the model
itself to place them where their natural forms lie: the contrastive loss keeps each variant's
document, and an uncased teacher (all-MiniLM-L6-v2) scores a variant as it scores the natural
text.

Two forms, each what the LLM reads of a collection written that way:

- ``capitals``: the text in capitals read by ``text_form="auto"``, i.e.
  ``fold_capitals(text.upper())`` (sentence case, acronyms lowered);
- ``lower``: :func:`~alignir.encoders.text_form.lower_without_punctuation`.

and three sides, as in the text-form benchmark's settings: the query only, the documents only
(the positive and the hard negatives), or both. Form and side are drawn per query (its texts
case-folded, :func:`~alignir.encoders.train.data.normal_query`), so every pair of one query gets
the same variant and no relevant document of a varied query is counted as its negative; a
varied pair's judged-relevant texts hold both forms. Held-out examples are never varied, so
held-out losses stay comparable with runs without variants.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Callable

import numpy as np

from alignir.encoders.text_form import fold_capitals, lower_without_punctuation
from alignir.encoders.train.data import Pair, normal_query
from alignir.errors import InvalidInputError

__all__ = ["TEXT_VARIANTS", "VARIANT_SIDES", "capitals_as_read", "vary_pair", "vary_text_forms"]


def capitals_as_read(text: str) -> str:
    """What the LLM reads of ``text`` written in capitals, under ``text_form="auto"``."""
    return fold_capitals(text.upper())


#: form name -> the text as the LLM reads it in that form
TEXT_VARIANTS: dict[str, Callable[[str], str]] = {"capitals": capitals_as_read, "lower": lower_without_punctuation}
#: which texts of a pair a variant changes
VARIANT_SIDES = ("query", "documents", "both")


def vary_pair(pair: Pair, form: str, side: str) -> Pair:
    """``pair`` with the texts of ``side`` in ``form``; a varied pair's relevant texts keep their
    natural form beside the varied one (so an in-batch copy in either form is not a negative)."""
    if form not in TEXT_VARIANTS:
        raise InvalidInputError(f"unknown text form {form!r}; use one of {sorted(TEXT_VARIANTS)}")
    if side not in VARIANT_SIDES:
        raise InvalidInputError(f"unknown side {side!r}; use one of {list(VARIANT_SIDES)}")
    fn = TEXT_VARIANTS[form]
    out = pair
    if side in ("query", "both"):
        out = replace(out, query=fn(out.query))
    if side in ("documents", "both"):
        varied = tuple(fn(t) for t in (pair.positive, *pair.relevant))
        out = replace(out, positive=fn(pair.positive), negatives=[fn(t) for t in pair.negatives],
                      relevant=tuple(dict.fromkeys((*pair.relevant, pair.positive, *varied))))
    return out


def vary_text_forms(pairs: list[Pair], share: float, seed: int) -> tuple[list[Pair], dict]:
    """A copy of ``pairs`` in which round(share × the number of distinct queries) queries, drawn
    with ``seed``, have every pair varied by one form and side drawn with the same seed, and a
    description for the run's saved config (how many queries and pairs got each form and side)."""
    if not 0.0 <= share <= 1.0:
        raise InvalidInputError(f"text_forms must be a share in [0, 1], got {share}")
    queries = list(dict.fromkeys(normal_query(p.query) for p in pairs))
    rng = np.random.default_rng([seed, 13])
    n = int(round(share * len(queries)))
    chosen = rng.permutation(len(queries))[:n]
    forms = sorted(TEXT_VARIANTS)
    drawn = {queries[i]: (forms[f], VARIANT_SIDES[s]) for i, f, s in
             zip(chosen.tolist(), rng.integers(len(forms), size=n).tolist(),
                 rng.integers(len(VARIANT_SIDES), size=n).tolist())}
    out, counts = [], {}
    for p in pairs:
        variant = drawn.get(normal_query(p.query))
        if variant is None:
            out.append(p)
            continue
        out.append(vary_pair(p, *variant))
        key = "/".join(variant)
        counts[key] = counts.get(key, 0) + 1
    return out, {"share": share, "queries": n, "pairs": sum(counts.values()), "by_form_and_side": dict(sorted(counts.items()))}
