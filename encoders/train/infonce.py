"""The InfoNCE LoRA baseline ("fair contrastive baseline", AutoRegEmbed App. A, GIRCSE Table 1).

The model reads texts exactly as the training-free PromptEOL embedder does (its template, its
tokenization, last-token pooling; ``PromptEOLEmbedder.embed_with``) and is fine-tuned with InfoNCE
(AutoRegEmbed eq.1) over in-batch + hard negatives. The embedder that reads the trained adapter is
``alignir.encoders.embedders.infonce.InfoNCEEmbedder`` (re-exported here).

Optional distillation (issue #19 item 2): ``teacher`` names a frozen dense embedder
(encoders.train.teacher, e.g. "all-minilm-l6-v2") and ``distill`` > 0 adds ``distill`` ×
KL(teacher || student) over the same in-batch candidates (losses.distill_kl, the teacher's
cosines at ``teacher_tau``) to the InfoNCE loss.
"""
from __future__ import annotations

from typing import Any

import torch

from alignir.encoders.embedders.infonce import InfoNCEEmbedder
from alignir.encoders.embedders.prompteol import PromptEOLEmbedder
from alignir.encoders.train.base import Method, pair_texts
from alignir.encoders.train.losses import distill_kl, info_nce
from alignir.errors import InvalidInputError

__all__ = ["InfoNCEMethod", "InfoNCEEmbedder", "prompteol_forward"]


def prompteol_forward(reader: PromptEOLEmbedder, model, texts: list[str], role: str) -> torch.Tensor:
    """Differentiable PromptEOL embedding [B, d] of ``texts`` through ``model`` (e.g. a peft model)."""
    return reader.embed_with(model, list(texts), role)


class InfoNCEMethod(Method):
    name = "infonce"
    STAGES = {"contrastive": "pairs"}
    DEFAULTS = {"contrastive": {"tau": 0.05, "instruction": None, "teacher": None, "distill": 0.0,
                                "teacher_tau": 0.05}}

    def setup(self, extra):
        self.reader = PromptEOLEmbedder(self.loaded, instruction=self.hp["instruction"],
                                        max_length=self.max_length, progress=False)
        self.teacher = None
        weight = float(self.hp["distill"])
        if weight < 0 or (weight > 0) != (self.hp["teacher"] is not None):
            raise InvalidInputError("distillation needs both a teacher and a weight distill > 0 "
                                    f"(got teacher={self.hp['teacher']!r}, distill={weight})")
        if weight > 0:
            from alignir.encoders.train.teacher import DenseTeacher

            self.teacher = DenseTeacher(str(self.hp["teacher"]), device="cpu")

    def embedder_options(self) -> dict[str, Any]:
        return {"instruction": self.hp["instruction"]}

    def loss(self, batch):
        queries, docs, pos = pair_texts(batch)
        q = self.reader.embed_with(self.model, queries, "query")
        d = self.reader.embed_with(self.model, docs, "document")
        loss = info_nce(q, d, torch.tensor(pos), self.hp["tau"])
        if self.teacher is None:
            return loss, {"loss": float(loss.detach())}
        kl = distill_kl(q, d, self.teacher.embed(queries), self.teacher.embed(docs), self.hp["tau"],
                        self.hp["teacher_tau"])
        total = loss + float(self.hp["distill"]) * kl
        return total, {"loss": float(total.detach()), "infonce": float(loss.detach()), "distill": float(kl.detach())}
