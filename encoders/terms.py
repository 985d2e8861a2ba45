"""Terms of the aligned-token vectors, without torch: the token -> term map (:class:`TermMap`)
and the term-by-term explanation of a sparse score (:func:`explain`). encoders.aligned computes
the vectors; the searcher needs only these to read an index and explain a hit (a BM25-only
search imports no torch).
"""
from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import scipy.sparse as sp

from alignir.checks import int_ids
from alignir.errors import InvalidInputError
from alignir.io import save_npy

__all__ = ["TermMap", "TermContribution", "explain", "token_text", "SPACE_MARK"]

# ----------------------------------------------------------------------------- term map

_WS = re.compile(r"\s")


@dataclass(frozen=True, eq=False)
class TermMap:
    """Token id -> term id.

    ``kind="identity"``: one term per token.  ``kind="fold"``: lexical folding — tokens whose
    decoded text is equal after stripping surrounding whitespace and case-folding
    (``stock`` / ``▁stock`` / ``Ġstock`` / ``Stock``) share one term.  Tokens that decode to
    only whitespace, or to partial UTF-8 bytes (U+FFFD), are never folded.

    ``term_strings[t]`` is a printable name without whitespace, unique per term, safe for
    export (e.g. Pyserini JsonVectorCollection keys).  Tokens that have no safe text get
    ``⟨id⟩``.
    """

    token_to_term: np.ndarray  # int32 [V]
    term_strings: tuple[str, ...]
    kind: str = "identity"

    def __post_init__(self) -> None:
        t2t = np.asarray(self.token_to_term)
        if t2t.ndim != 1 or not np.issubdtype(t2t.dtype, np.integer):
            raise InvalidInputError("token_to_term must be a 1-D integer array")
        if t2t.size and (t2t.min() < 0 or t2t.max() >= len(self.term_strings)):
            raise InvalidInputError("token_to_term refers to terms outside term_strings")
        object.__setattr__(self, "token_to_term", t2t.astype(np.int32))
        object.__setattr__(self, "term_strings", tuple(self.term_strings))

    @property
    def vocab_size(self) -> int:
        return int(self.token_to_term.shape[0])

    @property
    def n_terms(self) -> int:
        return len(self.term_strings)

    def map_ids(self, ids: np.ndarray) -> np.ndarray:
        """Term ids of token ids (any shape)."""
        shape = np.shape(ids)
        return self.token_to_term[int_ids(ids, self.vocab_size, "ids", "token ids")].reshape(shape)

    # -- construction -------------------------------------------------------------------

    @classmethod
    def identity(cls, vocab_size: int, tokenizer: Any = None) -> "TermMap":
        """One term per token; strings from the tokenizer's vocabulary when given."""
        vocab_size = int(vocab_size)
        if vocab_size < 1:
            raise InvalidInputError(f"vocab_size must be >= 1, got {vocab_size}")
        raw = _raw_tokens(tokenizer, vocab_size) if tokenizer is not None else [None] * vocab_size
        names = _unique_safe_names([(r, i) for i, r in enumerate(raw)])
        return cls(np.arange(vocab_size, dtype=np.int32), tuple(names), "identity")

    @classmethod
    def from_tokenizer(cls, tokenizer: Any, vocab_size: int | None = None, fold: bool = True) -> "TermMap":
        """Build from a HF tokenizer. ``vocab_size`` = rows of the LM head (may exceed the
        tokenizer's vocabulary: padded rows get their own ``⟨id⟩`` terms)."""
        V = int(vocab_size) if vocab_size is not None else len(tokenizer)
        if not fold:
            return cls.identity(V, tokenizer)
        raw = _raw_tokens(tokenizer, V)
        texts = _decoded_tokens(tokenizer, V)
        key_to_term: dict[str, int] = {}
        t2t = np.empty(V, dtype=np.int32)
        members: list[tuple[str | None, int]] = []  # (candidate name, first token id)
        for i in range(V):
            txt = texts[i]
            key = None
            if txt is not None and "\ufffd" not in txt:
                s = txt.strip()
                if s and not _WS.search(s):
                    key = s.casefold()
            if key is None:
                t2t[i] = len(members)
                members.append((raw[i], i))
                continue
            term = key_to_term.get(key)
            if term is None:
                term = len(members)
                key_to_term[key] = term
                members.append((key, i))
            t2t[i] = term
        return cls(t2t, tuple(_unique_safe_names(members)), "fold")

    # -- persistence --------------------------------------------------------------------

    def fingerprint(self) -> str:
        """sha256 over kind, mapping and term strings (stable across processes)."""
        h = hashlib.sha256(self.kind.encode())
        h.update(self.token_to_term.astype("<i4").tobytes())
        h.update("\n".join(self.term_strings).encode("utf-8"))
        return h.hexdigest()

    def save(self, folder: str | os.PathLike) -> None:
        """Write ``token_to_term.npy`` and ``terms.json`` (no pickle)."""
        os.makedirs(folder, exist_ok=True)
        save_npy(os.path.join(folder, "token_to_term.npy"), self.token_to_term.astype("<i4"))
        with open(os.path.join(folder, "terms.json"), "w", encoding="utf-8") as f:
            json.dump({"kind": self.kind, "fingerprint": self.fingerprint(),
                       "term_strings": list(self.term_strings)}, f, ensure_ascii=False)

    @classmethod
    def load(cls, folder: str | os.PathLike) -> "TermMap":
        with open(os.path.join(folder, "terms.json"), encoding="utf-8") as f:
            meta = json.load(f)
        t2t = np.load(os.path.join(folder, "token_to_term.npy"), allow_pickle=False)
        tm = cls(t2t, tuple(meta["term_strings"]), meta["kind"])
        if meta.get("fingerprint") and meta["fingerprint"] != tm.fingerprint():
            raise InvalidInputError(f"term map in {folder} is corrupt: fingerprint mismatch")
        return tm


def _raw_tokens(tokenizer: Any, V: int) -> list[str | None]:
    n = min(V, len(tokenizer))
    raw = list(tokenizer.convert_ids_to_tokens(list(range(n))))
    return [r if isinstance(r, str) else None for r in raw] + [None] * (V - n)


def _decoded_tokens(tokenizer: Any, V: int) -> list[str | None]:
    """Text of each token on its own (batched; fast tokenizers do this in Rust)."""
    n = min(V, len(tokenizer))
    special = set(getattr(tokenizer, "all_special_ids", []) or [])
    out = tokenizer.batch_decode([[i] for i in range(n)], skip_special_tokens=False,
                                 clean_up_tokenization_spaces=False)
    res: list[str | None] = [None if i in special else t for i, t in enumerate(out)]
    return res + [None] * (V - n)


def _unique_safe_names(members: Sequence[tuple[str | None, int]]) -> list[str]:
    """Printable, whitespace-free, unique names; fall back to ``⟨first_id⟩``."""
    names: list[str] = []
    seen: set[str] = set()
    for cand, first in members:
        name = cand
        if name is None or name == "" or _WS.search(name) or not name.isprintable() or name in seen:
            name = f"⟨{first}⟩"
            while name in seen:
                name += "'"
        seen.add(name)
        names.append(name)
    return names


# ----------------------------------------------------------------------------- explain


@dataclass(frozen=True)
class TermContribution:
    """One shared term of a (query, document) pair: contribution = query_weight·doc_weight
    (with a binary query this is the document weight summed in “A Text is Worth Several Tokens” eq.16)."""

    term: int
    string: str
    query_weight: float
    doc_weight: float
    contribution: float
    #: the text the term stands for, for display (:func:`token_text`; None: ``string`` is text already)
    text: str | None = None
    #: the token id the term was read from (None: a word term, e.g. the BM25 leg's)
    token: int | None = None


#: shown for a token's leading space (byte-level BPE "Ġ", SentencePiece "▁")
SPACE_MARK = "␣"


def token_text(tokenizer: Any, token_id: int) -> str:
    """The text one token stands for, readable: tokenizer-decoded, a leading space shown as
    :data:`SPACE_MARK` (``Ġculture`` → ``␣culture``), other unprintable characters escaped
    (``\\n``, ``\\x07``); a token that is
    only part of a UTF-8 character (byte-level BPE splits emoji: ``ðŁ``) is shown as its bytes
    (``⟨bytes f0 9f⟩``), or as ``⟨id N⟩`` when they cannot be told."""
    text = tokenizer.decode([int(token_id)], skip_special_tokens=False, clean_up_tokenization_spaces=False)
    if "\ufffd" in text:
        raw = _token_bytes(tokenizer, int(token_id))
        return f"⟨bytes {raw.hex(' ')}⟩" if raw else f"⟨id {int(token_id)}⟩"
    piece = tokenizer.convert_ids_to_tokens(int(token_id))
    # a SentencePiece tokenizer drops the leading space of a lone "▁word" when decoding it
    lead = text.startswith(" ") or (isinstance(piece, str) and piece.startswith("▁"))
    body = text[1:] if text.startswith(" ") else text
    shown = "".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii") for ch in body)
    return (SPACE_MARK if lead else "") + shown


def _byte_decoder() -> dict[str, int]:
    """Byte-level BPE's printable stand-ins for bytes (each byte one character), reversed."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    chars, n = list(keep), 0
    for b in range(256):
        if b not in keep:
            keep.append(b)
            chars.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(keep, chars)}


def _token_bytes(tokenizer: Any, token_id: int) -> bytes | None:
    piece = tokenizer.convert_ids_to_tokens(token_id)
    if not isinstance(piece, str):
        return None
    if piece.startswith("<0x") and piece.endswith(">") and len(piece) == 6:  # SentencePiece byte fallback
        return bytes([int(piece[3:5], 16)])
    table = _byte_decoder()
    if all(ch in table for ch in piece):
        return bytes(table[ch] for ch in piece)
    return None


def _row(x: Any, name: str) -> sp.csr_matrix:
    if sp.issparse(x):
        m = sp.csr_matrix(x)
    else:
        a = np.asarray(x, dtype=np.float32)
        if a.ndim != 1 and not (a.ndim == 2 and a.shape[0] == 1):
            raise InvalidInputError(f"{name} must be one row, got shape {a.shape}")
        m = sp.csr_matrix(a.reshape(1, -1))
    if m.shape[0] != 1:
        raise InvalidInputError(f"{name} must be a single row, got shape {m.shape}")
    m.sum_duplicates()
    return m


def explain(query_row: Any, doc_row: Any, term_map: TermMap | None = None) -> list[TermContribution]:
    """Why a document scored what it did: per term present in both rows, its query weight,
    document weight and contribution, sorted by contribution (descending).  The sum of the
    contributions equals the sparse dot product q·d."""
    q, dvec = _row(query_row, "query_row"), _row(doc_row, "doc_row")
    if q.shape[1] != dvec.shape[1]:
        raise InvalidInputError(f"query_row has {q.shape[1]} terms, doc_row has {dvec.shape[1]}")
    if term_map is not None and term_map.n_terms != q.shape[1]:
        raise InvalidInputError(f"term_map has {term_map.n_terms} terms, rows have {q.shape[1]}")
    shared, qi, di = np.intersect1d(q.indices, dvec.indices, assume_unique=True, return_indices=True)
    out = []
    for t, a, b in zip(shared, q.data[qi], dvec.data[di]):
        name = term_map.term_strings[t] if term_map is not None else str(int(t))
        out.append(TermContribution(int(t), name, float(a), float(b), float(a) * float(b)))
    out.sort(key=lambda c: (-c.contribution, c.term))
    return out
