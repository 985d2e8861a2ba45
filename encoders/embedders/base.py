"""The one interface every embedder family implements.

An embedder maps texts to dense float32 vectors h (one row per text, input order kept)
and exposes the LM head E_g of its causal LM so that h can be projected onto the
vocabulary (“A Text is Worth Several Tokens” §2, eq.15-16: aligned tokens are the top entries of E_g·h).
"""
from __future__ import annotations

import re
from abc import ABC, abstractmethod
from typing import Any, Sequence

import numpy as np
import torch

from alignir.checks import check_texts
from alignir.encoders.text_form import WordForm, read_texts

#: the truncation warning, with (truncated, total, role, max_length): logged per call by an
#: embedder, or once per corpus by encoders.cache when it encodes the corpus in parts
TRUNCATION_WARNING = "%d of %d %s texts truncated to max_length=%s tokens"

_SURROGATE = re.compile("[\ud800-\udfff]")


def clean_text(text: str) -> str:
    """Lone surrogates (e.g. from ``errors="surrogateescape"`` decoding) -> U+FFFD; the
    tokenizer cannot encode them."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return _SURROGATE.sub("\ufffd", text)


class Embedder(ABC):
    """Common interface: ``encode_queries`` / ``encode_documents`` -> float32 [n, d].

    Subclasses (one module per family under encoders/embedders/) set ``self.loaded``
    (an ``encoders.models.LoadedModel``) and implement ``_encode``.
    """

    #: registry name of the family, e.g. "prompteol", "autoregembed"
    family: str = "base"

    loaded: Any  # encoders.models.LoadedModel
    #: a trained map A [d, d] the aligned tokens are read through (set from an adapter that
    #: carries one, encoders.train.sparse_map); None: the LM head alone
    sparse_map: torch.Tensor | None = None
    sparse_map_sha: str | None = None
    #: the form in which the transformer reads a text (encoders.text_form): "off" reads it as
    #: given, "auto" reads runs of capitals in sentence case; get_embedder's ``text_form`` option
    text_form: str = "off"

    @property
    def tokenizer(self):
        return self.loaded.tokenizer

    @property
    def lm_head(self) -> torch.Tensor:
        """Output embedding matrix E_g, shape [V, d] (untied heads handled by the loader)."""
        return self.loaded.lm_head

    @property
    def aligned_head(self) -> torch.Tensor:
        """The matrix the aligned tokens are read through, [V, d]: E_g, or E_g·A when a sparse map
        A is set, so that a text's token logits are E_g·(A·h_adj) while its dense vector stays h
        (the map changes the aligned-token leg only)."""
        if self.sparse_map is None:
            return self.lm_head
        held = getattr(self, "_aligned_head", None)
        if held is None or held[0] is not self.sparse_map:
            W = self.lm_head
            head = (W.float() @ self.sparse_map.to(device=W.device, dtype=torch.float32)).to(W.dtype)
            held = self._aligned_head = (self.sparse_map, head)
        return held[1]

    @property
    def dim(self) -> int:
        return int(self.lm_head.shape[1])

    def read_texts(self, texts: Sequence[str], word_form: WordForm | None = None) -> list[str]:
        """What the transformer reads of each text under :attr:`text_form` (same length, only
        letter case changed; encoders.text_form). ``word_form``: the form of a word in a run of
        capitals (an index's encoders.word_forms.WordForms.form; queries only)."""
        return read_texts(texts, self.text_form, word_form)

    def encode_queries(self, texts: Sequence[str], word_form: WordForm | None = None, **kw) -> np.ndarray:
        """Dense vectors of queries; ``word_form`` as in :meth:`read_texts`."""
        return self._encode(self.read_texts(check_texts(texts), word_form), role="query", **kw)

    def encode_documents(self, texts: Sequence[str], **kw) -> np.ndarray:
        return self._encode(self.read_texts(check_texts(texts)), role="document", **kw)

    @abstractmethod
    def _encode(self, texts: list[str], role: str, **kw) -> np.ndarray:
        """Return float32 [len(texts), d] in input order. role is "query" or "document"."""

    @abstractmethod
    def fingerprint(self) -> dict[str, Any]:
        """Everything that changes the vectors: model identity + file hash/revision,
        family, pooling, template, instruction, max length, adapter hash, options.
        Must be JSON-serialisable and stable across processes; a family adds
        :meth:`text_form_fingerprint` to it."""

    def text_form_fingerprint(self) -> dict[str, Any]:
        """``{"text_form": ...}`` when the text form is not "off" (an encoder that reads texts as
        given keeps the fingerprint it had before the option existed), else nothing."""
        return {} if self.text_form == "off" else {"text_form": self.text_form}

    def dense_fingerprint(self) -> dict[str, Any]:
        """:meth:`fingerprint` without what changes the aligned tokens only (a sparse map): the key
        of the dense vectors in the embedding cache, which an adapter with and without a trained
        sparse map share."""
        fp = dict(self.fingerprint())
        fp.pop("sparse_map_sha256", None)
        fp.pop("text_form", None)  # the cache keys vectors by the text read (EmbeddingCache)
        return fp

    def text_budget(self, role: str = "document") -> int | None:
        """How many tokens of a text the encoder reads before truncating it (the text's share
        of ``max_length``; None: no limit known). Passages longer than this would be cut."""
        n = getattr(self, "max_length", None)
        return int(n) if n else None

    def surface_token_ids(self, texts: Sequence[str], word_form: WordForm | None = None) -> list[np.ndarray]:
        """Deduplicated tokenizer ids of each text as the transformer reads it (:meth:`read_texts`,
        with ``word_form``; no template, no special tokens): the surface token set T_q of “A Text
        is Worth Several Tokens” eq.16."""
        out = []
        for t in self.read_texts(check_texts(texts), word_form):
            ids = self.tokenizer(clean_text(t), add_special_tokens=False)["input_ids"]
            out.append(np.unique(np.asarray(ids, dtype=np.int64)).astype(np.int32))
        return out
