"""The ``pretrained`` family: a public retrieval-trained LLM embedder read the way it was trained.

Its settings come from a registered profile (encoders.pretrained.PRETRAINED: Qwen3-Embedding,
gte-Qwen2-instruct, e5-mistral-7b-instruct, GritLM-7B, LLM2Vec) — the one the model was loaded
as, or ``profile=NAME`` for a local copy — and each can be given explicitly instead:

- ``pooling``: "last" (the last real token) or "mean" (over the text's own tokens: instruction,
  template and special tokens excluded, as GritLM and LLM2Vec pool);
- ``query_template`` (``{instruction}`` and ``{text}``) for queries with an instruction;
  ``document_template`` (``{text}``) for documents and for queries without one;
- ``instruction``: the query task (a task name of encoders.templates.INSTRUCTIONS or literal
  text; None: the profile's, "" : none);
- ``padding_side``: "left" | "right" (position ids count real tokens only, either way);
- ``bidirectional``: attend in both directions (encoders.pretrained.bidirectional_attention);
- ``append_token``: a token appended to every prompt (e5's EOS, Qwen's ``<|endoftext|>``),
  unless the tokenizer appends it already.

Batching, truncation inside the template, empty texts and the progress bar are the prompt
families' (encoders.embedders.prompteol).
"""
from __future__ import annotations

from typing import Any

import torch

from alignir.encoders.embedders.prompteol import PromptEmbedder
from alignir.encoders.models import LoadedModel
from alignir.encoders.pooling import POOLINGS
from alignir.encoders.pretrained import PRETRAINED, bidirectional_attention, profile_of
from alignir.encoders.templates import PLACEHOLDER, Template, resolve_instruction
from alignir.errors import InvalidInputError

__all__ = ["PretrainedEmbedder", "FINGERPRINT_FORMAT"]

FINGERPRINT_FORMAT = 1
INSTRUCTION = "{instruction}"


class PretrainedEmbedder(PromptEmbedder):
    """A public LLM embedder read through its own prompts, pooling, padding and attention."""

    family = "pretrained"

    def __init__(
        self,
        loaded: LoadedModel,
        *,
        profile: str | None = None,
        pooling: str | None = None,
        query_template: str | None = None,
        document_template: str | None = None,
        instruction: str | None = None,
        padding_side: str | None = None,
        bidirectional: bool | None = None,
        append_token: str | None = None,
        max_length: int = 512,
        batch_tokens: int = 4096,
        max_batch_size: int = 64,
        empty: str = "zero",
        progress: bool = True,
        adapter: str | None = None,
        prefix_cache: bool = False,
    ) -> None:
        if adapter is not None:
            raise InvalidInputError("the pretrained family takes no adapter option; a profile's PEFT adapters are "
                                    "merged when the model loads (encoders.pretrained)")
        if prefix_cache:
            raise InvalidInputError("the pretrained family has no prefix cache (prefix_cache=True)")
        if not isinstance(loaded, LoadedModel):
            raise InvalidInputError(f"loaded must be an encoders.models.LoadedModel, got {type(loaded).__name__}")
        name = profile if profile is not None else loaded.identity.get("profile")
        prof = profile_of(name)
        if name is not None and prof is None:
            raise InvalidInputError(f"unknown pretrained profile {name!r}; known: {', '.join(sorted(PRETRAINED))}")
        self.profile = prof.name if prof is not None else None
        pooling = pooling if pooling is not None else (prof.pooling if prof else "last")
        if pooling not in POOLINGS:
            raise InvalidInputError(f"unknown pooling {pooling!r}; use one of {POOLINGS}")
        side = padding_side if padding_side is not None else (prof.padding_side if prof else "right")
        super().__init__(loaded, template="{text}", pooling=pooling, max_length=max_length,
                         batch_tokens=batch_tokens, max_batch_size=max_batch_size, padding_side=side,
                         empty=empty, progress=progress, family="last")
        self.family = "pretrained"
        self.bidirectional = bool(bidirectional if bidirectional is not None else (prof.bidirectional if prof else False))
        qt = query_template if query_template is not None else (prof.query_template if prof else "{text}")
        dt = document_template if document_template is not None else (prof.document_template if prof else "{text}")
        for what, pattern in (("query_template", qt), ("document_template", dt)):
            if not isinstance(pattern, str) or pattern.count(PLACEHOLDER) != 1:
                raise InvalidInputError(f"{what} must contain {PLACEHOLDER} exactly once, got {pattern!r}")
        if INSTRUCTION in dt:
            raise InvalidInputError(f"document_template takes no {INSTRUCTION}: {dt!r}")
        self.query_template, self.document_template = qt, dt
        if instruction is None:
            instruction = prof.instruction if prof else None
        self.query_instruction = resolve_instruction(instruction)
        if self.query_instruction and PLACEHOLDER in self.query_instruction:
            raise InvalidInputError(f"the instruction may not contain {PLACEHOLDER}: {self.query_instruction!r}")
        token = append_token if append_token is not None else (prof.append_token if prof else None)
        self.append_token = token or None
        self._suffix = self._appended_suffix(self.append_token)
        self.templates = {"query": self._role_template("query"), "document": self._role_template("document")}
        self.template = self.templates["document"]

    def _appended_suffix(self, token: str | None) -> str:
        """The text to append to every prompt for ``token``: "" when the tokenizer adds it itself."""
        if not token:
            return ""
        tok = self.tokenizer
        ids = tok(token, add_special_tokens=False)["input_ids"]
        tid = tok.convert_tokens_to_ids(token)
        if len(ids) != 1 or ids[0] != tid:
            raise InvalidInputError(f"append_token {token!r} is not one token of this tokenizer")
        probe = tok("a", add_special_tokens=True)["input_ids"]
        return "" if probe and probe[-1] == tid else token

    def _role_template(self, role: str) -> Template:
        if role == "query" and self.query_instruction:
            pattern = self.query_template.replace(INSTRUCTION, self.query_instruction)
        else:
            pattern = self.document_template
        return Template(f"pretrained-{role}", pattern + self._suffix)

    # ------------------------------------------------------------------ prompts and forward

    def _render(self, text: str, role: str) -> tuple[str, tuple[int, int]]:
        return self.templates[role].render(text)

    def text_budget(self, role: str = "document") -> int | None:
        return max(1, self.max_length - self._template_overhead(role))

    def _forward(self, input_ids, attn, position_ids) -> torch.Tensor:
        if not self.bidirectional:
            return super()._forward(input_ids, attn, position_ids)
        with bidirectional_attention(self._backbone):
            return super()._forward(input_ids, attn, position_ids)

    def embed_with(self, model: torch.nn.Module, texts: list[str], role: str) -> torch.Tensor:
        if not self.bidirectional:
            return super().embed_with(model, texts, role)
        with bidirectional_attention(model):
            return super().embed_with(model, texts, role)

    # ------------------------------------------------------------------ fingerprint

    def fingerprint(self) -> dict[str, Any]:
        return {
            "format": FINGERPRINT_FORMAT,
            "family": self.family,
            "profile": self.profile,
            "model": dict(self.loaded.identity),
            "dtype": str(self.loaded.dtype).replace("torch.", ""),
            "query_template": self.query_template,
            "document_template": self.document_template,
            "query_instruction": self.query_instruction,
            "appended": self._suffix or None,
            "pooling": self.pooling,
            "pool_span": "text" if self.pooling != "last" else "last-real-token",
            "padding_side": self.padding_side,
            "attention": "bidirectional" if self.bidirectional else "causal",
            "max_length": self.max_length,
            "empty": self.empty,
            **self.text_form_fingerprint(),
        }
