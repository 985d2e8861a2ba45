"""The lexical component of an index folder: word-term weights (BM25) as a second sparse index.

A :class:`LexicalLeg` is an :class:`index.sparse.SparseIndex` over word terms (scored by the
same numba kernel as the aligned tokens) plus its vocabulary (term id = position) and the
parameters that made the weights (k1, b, analyser). It knows nothing about how words are
found in text: retrieval/bm25.py turns texts into weights and queries into term vectors.

A part of the index folder (``index.parts.Part``). Folder layout (``index.store`` puts it at
``lexical/`` and checksums every file)::

    postings/     index.sparse.SparseIndex.save output
    vocab.json    JSON list of the term strings (no pickle)

The parameters live in the part's manifest entry (``manifest["parts"]["lexical"]["params"]``,
what :meth:`LexicalLeg.describe` returns), not in this folder.
"""
from __future__ import annotations

from alignir.errors import InvalidInputError

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from alignir.index.parts import check_empty_folder
from alignir.index.sparse import SparseIndex

POSTINGS_DIR = "postings"
VOCAB_FILE = "vocab.json"


@dataclass
class LexicalLeg:
    """Postings [n_docs, len(vocab)] + vocabulary + the parameters that made the weights."""

    index: SparseIndex
    vocab: list[str]
    params: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.vocab = [str(t) for t in self.vocab]
        if int(self.index.n_terms) != len(self.vocab):
            raise InvalidInputError(f"lexical postings have {self.index.n_terms} terms, the vocabulary "
                             f"{len(self.vocab)}")
        if len(set(self.vocab)) != len(self.vocab):
            raise InvalidInputError("the lexical vocabulary has duplicate terms")
        self.params = json.loads(json.dumps(dict(self.params)))  # JSON-clean for the manifest

    @property
    def n_docs(self) -> int:
        return int(self.index.n_docs)

    @property
    def n_terms(self) -> int:
        return len(self.vocab)

    def describe(self) -> dict[str, Any]:
        """The index manifest's entry for this part (``index.parts.Part``): the parameters that
        made the weights (which :meth:`load` reads back) and the sizes."""
        return {"params": dict(self.params), "n_terms": self.n_terms,
                "n_postings": int(self.index.n_postings)}

    def save(self, folder: str | Path) -> None:
        """Write ``postings/`` and ``vocab.json`` into ``folder`` (new or empty)."""
        folder = check_empty_folder(folder)
        self.index.save(folder / POSTINGS_DIR)
        with open(folder / VOCAB_FILE, "w", encoding="utf-8") as f:
            json.dump(self.vocab, f, ensure_ascii=False, separators=(",\n", ": "))
            f.write("\n")

    @classmethod
    def load(cls, folder: str | Path, entry: Mapping[str, Any] | None = None, *,
             mmap: bool = True) -> "LexicalLeg":
        """Open a folder written by :meth:`save`; ``entry`` (what :meth:`describe` returned)
        gives the parameters (``entry["params"]``)."""
        path = Path(folder)
        vf = path / VOCAB_FILE
        if not vf.is_file():
            raise InvalidInputError(f"{path}: the lexical vocabulary {VOCAB_FILE} is missing")
        try:
            vocab = json.loads(vf.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise InvalidInputError(f"{vf} is not a valid JSON term list: {e}") from None
        if not isinstance(vocab, list) or not all(isinstance(t, str) for t in vocab):
            raise InvalidInputError(f"{vf} must hold a JSON list of strings")
        params = (entry or {}).get("params") or {}
        if not isinstance(params, Mapping):
            raise InvalidInputError(f"{path}: the lexical parameters must be a JSON object")
        index = SparseIndex.load(path / POSTINGS_DIR, mmap=mmap)
        return cls(index, vocab, dict(params))

    def term_strings(self, terms: Sequence[int]) -> list[str]:
        return [self.vocab[int(t)] for t in terms]
