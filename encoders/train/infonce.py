"""The InfoNCE LoRA baseline ("fair contrastive baseline", AutoRegEmbed App. A, GIRCSE Table 1).

The model reads texts exactly as the training-free PromptEOL embedder does (its template, its
tokenization, last-token pooling; ``PromptEOLEmbedder.embed_with``) and is fine-tuned with InfoNCE
(AutoRegEmbed eq.1) over in-batch + hard negatives. The embedder that reads the trained adapter is
``alignir.encoders.embedders.infonce.InfoNCEEmbedder`` (re-exported here).
"""
from __future__ import annotations

from typing import Any

import torch

from alignir.encoders.embedders.infonce import InfoNCEEmbedder
from alignir.encoders.embedders.prompteol import PromptEOLEmbedder
from alignir.encoders.train.base import Method, pair_texts
from alignir.encoders.train.losses import info_nce

__all__ = ["InfoNCEMethod", "InfoNCEEmbedder", "prompteol_forward"]


def prompteol_forward(reader: PromptEOLEmbedder, model, texts: list[str], role: str) -> torch.Tensor:
    """Differentiable PromptEOL embedding [B, d] of ``texts`` through ``model`` (e.g. a peft model)."""
    return reader.embed_with(model, list(texts), role)


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
        q = self.reader.embed_with(self.model, queries, "query")
        d = self.reader.embed_with(self.model, docs, "document")
        loss = info_nce(q, d, torch.tensor(pos), self.hp["tau"])
        return loss, {"loss": float(loss.detach())}
