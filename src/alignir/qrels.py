"""The qrels reader shared by evaluation (retrieval/) and training data (encoders/train/).

It sits below both layers: encoders/ never imports retrieval/, and training must read a qrels
file exactly as the evaluation does (a byte order mark, a header, TREC rows, relevance ``1.0``).
"""
from __future__ import annotations

from pathlib import Path

import logging
import re

from alignir.errors import QrelsError

__all__ = ["read_qrels"]

log = logging.getLogger(__name__)

#: the words of a qrels header (BEIR "query-id corpus-id score", TREC "qid iter docno rel", ...)
_HEADER_WORDS = re.compile(r"(query|q|topic)[-_ ]?(id|no)?|corpus[-_ ]?id|doc(ument)?[-_ ]?(id|no)?|iter(ation)?|"
                           r"q0|score|rel(evance)?|label|judg(e)?ment", re.IGNORECASE)


def _is_header(cols: list[str]) -> bool:
    """A first line is a header only when its relevance column is a header word and no column
    is a number: ``1 17 0.5`` or ``q1 d7 1`` are judgements."""
    if any(_number(c) for c in cols):
        return False
    return bool(_HEADER_WORDS.fullmatch(cols[-1]))


def _number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def read_qrels(path: str | Path, split: str = "test") -> dict[str, dict[str, int]]:
    """Read qrels -> ``{query_id: {doc_id: relevance}}``.

    ``path`` is a BEIR folder (reads ``qrels/{split}.tsv``) or a qrels file. Accepts the
    BEIR tsv (``query-id corpus-id score``, optional header) and TREC qrels
    (``qid iter docid rel``), tab or space separated. The first line is a header only when it
    is made of header words (no number, a relevance column such as ``score``); anything else is
    a judgement or an error. Negative relevance (TREC's -1/-2 "junk" grades) is read as 0, not
    relevant, with a warning naming the lines.
    """
    p = Path(path)
    if p.is_dir():
        qdir = p / "qrels"
        p = qdir / f"{split}.tsv"
        if not p.exists():
            have = sorted(f.stem for f in qdir.glob("*.tsv")) if qdir.is_dir() else []
            raise FileNotFoundError(
                f"no qrels for split {split!r}: {p} does not exist"
                + (f" (available splits: {', '.join(have)})" if have else "")
            )
    elif not p.exists():
        raise FileNotFoundError(f"qrels file not found: {p}")
    qrels: dict[str, dict[str, int]] = {}
    problems: list[tuple[int, str]] = []
    negatives: list[int] = []
    with open(p, "rb") as fh:
        for ln, raw in enumerate(fh, start=1):
            try:
                line = raw.decode("utf-8").strip()
            except UnicodeDecodeError as e:
                problems.append((ln, f"invalid UTF-8 byte 0x{raw[e.start]:02x} at column {e.start + 1}"))
                continue
            if ln == 1:  # a byte order mark ("UTF-8 with BOM") is not part of the first query id
                line = line.removeprefix("\ufeff").strip()
            if not line:
                continue
            cols = line.split()
            if len(cols) == 3:
                qid, did, rel = cols
            elif len(cols) == 4:
                qid, _, did, rel = cols
            else:
                problems.append((ln, f"expected 3 (BEIR) or 4 (TREC) columns, got {len(cols)}"))
                continue
            if ln == 1 and _is_header(cols):  # "query-id corpus-id score": never a judgement
                continue
            try:
                r = int(rel)
            except ValueError:
                try:
                    r = int(float(rel)) if float(rel).is_integer() else None
                except ValueError:
                    r = None
                if r is None:
                    problems.append((ln, f"relevance {rel!r} is not an integer"))
                    continue
            if r < 0:
                negatives.append(ln)
                r = 0
            prev = qrels.setdefault(qid, {}).get(did)
            if prev is not None and prev != r:
                problems.append((ln, f"({qid}, {did}) judged twice with different relevance ({prev} vs {r})"))
                continue
            qrels[qid][did] = r
    if problems:
        raise QrelsError(p, problems)
    if negatives:
        log.warning("%s: %d judgement(s) with negative relevance (line %s) read as 0, not relevant (as "
                    "trec_eval does)", p, len(negatives), ", ".join(map(str, negatives[:5])) +
                    (", ..." if len(negatives) > 5 else ""))
    if not qrels:
        raise QrelsError(p, [(0, "no judgements")])
    return qrels
