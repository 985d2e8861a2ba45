"""Query framing (``--query-frames SHARE``): a share of the training queries rewritten as the
requests people type, "What is known about X?" or "Find documents about X.", the query's text X
kept whole.

The training queries of the pair sources are claims (SciFact), titles and crops: none carries the
words a request is framed in. Test queries often do ("Describe ...", "What is ... ?"), and a model
trained on bare topics can let such a word reach the top of the query's aligned tokens, where it
displaces the topic (seen on ADI after training on several corpora; docs/training.md). Framed queries keep their document, so the contrastive loss (and a teacher,
which reads the framed query) asks the model to place the framed query where the bare one lies.
The frames are fixed here and drawn with the run's seed; held-out examples are never framed, so
held-out losses stay comparable with runs without framing.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from alignir.encoders.train.data import Pair
from alignir.errors import InvalidInputError

__all__ = ["QUERY_FRAMES", "frame_query", "frame_queries"]

#: request templates; {} is the query's text with its final punctuation removed
QUERY_FRAMES = (
    "What is known about {}?",
    "Describe {}.",
    "Find documents about {}.",
    "I am looking for information on {}.",
    "What evidence is there on {}?",
    "Papers that discuss {}.",
    "Give an account of {}.",
    "How has research dealt with {}?",
    "Tell me about {}.",
    "Search for work on {}.",
)


def frame_query(query: str, frame: str) -> str:
    """``query`` inside ``frame``: trailing ``.?!`` and spaces dropped, the first letter lowered
    unless the first word is an acronym or a name with capitals after its first letter ("DNA",
    "iPhone" stay as they are)."""
    text = query.strip().rstrip(".?!").rstrip()
    if not text:
        return query
    first = text.split(" ", 1)[0]
    if first[:1].isupper() and not any(c.isupper() for c in first[1:]):
        text = text[0].lower() + text[1:]
    return frame.format(text)


def frame_queries(pairs: list[Pair], share: float, seed: int) -> tuple[list[Pair], dict]:
    """A copy of ``pairs`` in which round(share × len) queries, drawn with ``seed``, are framed by a
    frame drawn with the same seed (documents, negatives and judged-relevant texts unchanged), and
    a description for the run's saved config."""
    if not 0.0 <= share <= 1.0:
        raise InvalidInputError(f"query_frames must be a share in [0, 1], got {share}")
    rng = np.random.default_rng([seed, 11])
    n = int(round(share * len(pairs)))
    chosen = rng.permutation(len(pairs))[:n]
    frames = rng.integers(len(QUERY_FRAMES), size=n)
    out = list(pairs)
    for i, f in zip(chosen.tolist(), frames.tolist()):
        out[i] = replace(out[i], query=frame_query(out[i].query, QUERY_FRAMES[f]))
    return out, {"share": share, "framed": n, "frames": len(QUERY_FRAMES)}
