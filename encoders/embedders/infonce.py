"""PromptEOL read through an InfoNCE-trained LoRA adapter (the contrastive baseline of AutoRegEmbed
App. A "fair comparative learning baselines"; trained by ``alignir train infonce``).

The adapter changes the model only: template, instruction, truncation and last-token pooling are
the training-free PromptEOL embedder's (“A Text is Worth Several Tokens” §2.2).
"""
from __future__ import annotations

from typing import Any

from alignir.encoders.embedders.adapters import adapter_dir, adapter_hash, load_adapter, read_sparse_map
from alignir.encoders.embedders.prompteol import PromptEOLEmbedder
from alignir.encoders.models import backbone

__all__ = ["InfoNCEEmbedder"]


class InfoNCEEmbedder(PromptEOLEmbedder):
    """PromptEOL embedder reading through an InfoNCE-trained LoRA adapter (``adapter=DIR``).

    Queries get the instruction the adapter was trained with (``alignir train infonce --set
    instruction=...``, saved in its ``embedder_options``) unless ``instruction`` is given.
    """

    family = "prompteol"

    def __init__(self, loaded, *, adapter: str | None = None, **options: Any) -> None:
        self.adapter = str(adapter) if adapter else None
        self.adapter_sha = None
        self.adapter_meta: dict[str, Any] = {}
        if self.adapter:
            self._peft, _, self.adapter_meta = load_adapter(loaded.model, self.adapter, loaded.identity)
        trained = self.adapter_meta.get("embedder_options") or {}
        if options.get("instruction") is None and trained.get("instruction"):
            options["instruction"] = trained["instruction"]  # the query instruction it was trained with
        super().__init__(loaded, **options)
        if self.adapter:
            self._backbone = backbone(self._peft)
            self.adapter_sha = adapter_hash(self.adapter)
            self.sparse_map, self.sparse_map_sha = read_sparse_map(adapter_dir(self.adapter), self.dim)

    def fingerprint(self) -> dict[str, Any]:
        fp = dict(super().fingerprint())
        fp["adapter_sha256"] = self.adapter_sha
        if self.adapter_sha:
            fp["family"] = "infonce"
        if self.sparse_map_sha:
            fp["sparse_map_sha256"] = self.sparse_map_sha
        return fp
