"""The InfoNCE LoRA baseline ("fair contrastive baseline", AutoRegEmbed App. A, GIRCSE Table 1).

The model reads texts exactly as the training-free PromptEOL embedder does (its template, its
tokenization, last-token pooling) and is fine-tuned with InfoNCE (AutoRegEmbed eq.1) over in-batch
+ hard negatives. ``InfoNCEEmbedder`` is that PromptEOL embedder with the trained adapter loaded.
"""
from __future__ import annotations

from typing import Any

import torch

from alignir.encoders.embedders.prompteol import PromptEOLEmbedder
from alignir.encoders.models import backbone
from alignir.encoders.pooling import pool
from alignir.encoders.train.adapter import adapter_hash, load_adapter
from alignir.encoders.train.base import Method, pair_texts
from alignir.encoders.train.losses import info_nce

__all__ = ["InfoNCEMethod", "InfoNCEEmbedder", "prompteol_forward"]


def prompteol_forward(reader: PromptEOLEmbedder, model, texts: list[str], role: str) -> torch.Tensor:
    """Differentiable PromptEOL embedding [B, d] of ``texts`` through ``model`` (e.g. a peft model)."""
    ids, pos, _, _ = reader._prepare(list(texts), role)
    input_ids, attn, position_ids, pmask = reader._collate(ids, pos)
    dev = model.get_input_embeddings().weight.device
    out = backbone(model)(input_ids=input_ids.to(dev), attention_mask=attn.to(dev),
                          position_ids=position_ids.to(dev), use_cache=False)
    return pool(reader.pooling, out.last_hidden_state, attn.to(dev), pmask.to(dev))


class InfoNCEMethod(Method):
    name = "infonce"
    STAGES = {"contrastive": "pairs"}
    DEFAULTS = {"contrastive": {"tau": 0.05, "instruction": None}}

    def setup(self, extra):
        self.reader = PromptEOLEmbedder(self.loaded, instruction=self.hp["instruction"],
                                        max_length=self.max_length, progress=False)

    def embedder_options(self) -> dict[str, Any]:
        return {"instruction": self.hp["instruction"]}

    def loss(self, batch):
        queries, docs, pos = pair_texts(batch)
        q = prompteol_forward(self.reader, self.model, queries, "query")
        d = prompteol_forward(self.reader, self.model, docs, "document")
        loss = info_nce(q, d, torch.tensor(pos), self.hp["tau"])
        return loss, {"loss": float(loss.detach())}


class InfoNCEEmbedder(PromptEOLEmbedder):
    """PromptEOL embedder reading through an InfoNCE-trained LoRA adapter (``adapter=DIR``)."""

    family = "prompteol"

    def __init__(self, loaded, *, adapter: str | None = None, **options: Any) -> None:
        super().__init__(loaded, **options)
        self.adapter = str(adapter) if adapter else None
        self.adapter_sha = None
        if self.adapter:
            self._peft, _, self.adapter_meta = load_adapter(loaded.model, self.adapter)
            self._backbone = backbone(self._peft)
            self.adapter_sha = adapter_hash(self.adapter)

    def fingerprint(self) -> dict[str, Any]:
        fp = dict(super().fingerprint())
        fp["adapter_sha256"] = self.adapter_sha
        if self.adapter_sha:
            fp["family"] = "infonce"
        return fp
