"""Training-free embedders: a frozen causal LM, a prompt template and a pooling (“A Text is Worth Several Tokens” §2).

Families (registry name -> template + pooling):

- ``prompteol``      PromptEOL ``This sentence: "[text]" means in one word: "`` + last token
- ``last``           raw text + last token
- ``mean``           raw text + mean over the text's tokens
- ``weighted-mean``  raw text + position-weighted mean (“A Text is Worth Several Tokens” eq.3, α_j = j/Σj)
- ``echo``           ``Rewrite the sentence: [text], rewritten sentence: [text]`` + mean over
                     the second copy only

Mechanics shared by all of them:

- Queries get an optional task instruction in front of the prompt (“A Text is Worth Several Tokens” App. C.2, Table 7;
  ``instruction="scifact"`` or a literal string); documents get ``document_instruction`` (default none).
- Mean-type pooling reads only the tokens of the text itself (not instruction, template or BOS);
  last-token pooling reads the last *real* token, found through the attention mask.
- Long texts are truncated *inside* the template (the template's suffix, which PromptEOL reads
  out, is always kept) so the whole prompt fits ``max_length``; the count is logged and kept in
  ``last_stats``.
- Lone surrogate code points (undecodable bytes read with ``surrogateescape``) become U+FFFD.
- Empty or whitespace-only texts: with ``empty="zero"`` (default) they get an all-zero vector
  (they contain nothing to retrieve by, and a zero vector matches nothing) and are counted in
  ``last_stats["n_empty"]``; with ``empty="error"`` they raise ValueError naming their positions.
- Dynamic batching: prompts sorted by token length, batches filled up to ``batch_tokens``
  padded tokens (and ``max_batch_size`` rows; a prompt longer than the budget runs alone) and
  closed before padding would exceed 5 % of a batch's positions (``MAX_PADDING``);
  vectors come back in input order. Unset, both follow the device (encoders.batching: a fixed
  small budget on the CPU, a share of the free memory on a GPU).
- ``prefix_cache=True`` (off by default): the fixed prompt prefix (instruction + template head)
  runs once per role and its KV cache is reused by every text (encoders.prefix_cache); vectors
  equal the full forward's up to float rounding, so it is not part of the fingerprint.
  ``last_stats["n_prefix_cached"]`` counts the texts that used it.
- ``compile=True`` (off by default): the full forward runs through ``torch.compile`` (dynamic
  shapes, so batches of any size and length share one compiled graph; the first batch pays the
  compilation). It fuses the many small element-wise kernels around each layer's matmuls, which
  is where a small model's forward spends its time on a GPU; vectors equal the eager forward's
  up to float rounding, so it is not part of the fingerprint.
"""
from __future__ import annotations

from alignir.checks import check_texts
from alignir.errors import InvalidInputError

import itertools
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from alignir.encoders.batching import batch_budget, in_length_groups
from alignir.encoders.embedders.base import TRUNCATION_WARNING, Embedder, clean_text
from alignir.encoders.fast_tokenize import encode_batch
from alignir.encoders.models import LoadedModel, backbone
from alignir.encoders.pooling import POOLINGS, pool
from alignir.encoders.prefix_cache import PrefixCache
from alignir.encoders.templates import INSTRUCTION_SEPARATOR, Template, get_template, resolve_instruction

log = logging.getLogger(__name__)

__all__ = [
    "PromptEmbedder",
    "PromptEOLEmbedder",
    "LastTokenEmbedder",
    "MeanEmbedder",
    "WeightedMeanEmbedder",
    "EchoEmbedder",
    "FAMILY_DEFAULTS",
    "FINGERPRINT_FORMAT",
]

FINGERPRINT_FORMAT = 1

#: family -> (template, pooling)
FAMILY_DEFAULTS: dict[str, tuple[str, str]] = {
    "prompteol": ("prompteol", "last"),
    "last": ("none", "last"),
    "mean": ("none", "mean"),
    "weighted-mean": ("none", "weighted-mean"),
    "echo": ("echo", "mean"),
}

ROLES = ("query", "document")

#: the largest padding share of a batch: prompts of close lengths share a batch (length buckets)
MAX_PADDING = 0.05

#: texts tokenized per step beside a GPU (the next step's on a thread while the GPU runs)
GPU_STEP_TEXTS = 2048


def _to_device(t: torch.Tensor, device: torch.device) -> torch.Tensor:
    """``t`` on ``device``; to a GPU through pinned memory without waiting, so the CPU goes on
    preparing the next batch while the GPU still runs this one."""
    if device.type != "cuda" or t.device.type != "cpu":
        return t.to(device)
    return t.pin_memory().to(device, non_blocking=True)


def _span_positions(offsets: list[tuple[int, int]], start: int, end: int) -> list[int]:
    """Positions of the tokens whose characters overlap ``[start, end)``; zero-width tokens (a
    post-processor's special tokens, which may sit anywhere) never."""
    return [j for j, (a, b) in enumerate(offsets) if b > a and a < end and b > start]


class PromptEmbedder(Embedder):
    """A frozen causal LM read out through a template and a pooling. See the module docstring."""

    family = "prompteol"
    #: the largest share of a batch's positions that may be padding (see :meth:`_batches`)
    max_padding = MAX_PADDING

    def __init__(
        self,
        loaded: LoadedModel,
        *,
        template: str | Template | None = None,
        pooling: str | None = None,
        instruction: str | None = None,
        document_instruction: str | None = None,
        max_length: int = 512,
        batch_tokens: int | None = None,
        max_batch_size: int | None = None,
        padding_side: str = "right",
        empty: str = "zero",
        progress: bool = True,
        family: str | None = None,
        adapter: str | None = None,
        prefix_cache: bool = False,
        compile: bool = False,
    ) -> None:
        if adapter is not None:
            raise InvalidInputError(
                f"the training-free family {self.family!r} takes no adapter; for PromptEOL read through a "
                "trained LoRA use get_embedder('infonce', model, adapter=...)"
            )
        if not isinstance(loaded, LoadedModel):
            raise InvalidInputError(f"loaded must be an encoders.models.LoadedModel, got {type(loaded).__name__}")
        if family is not None:
            if family not in FAMILY_DEFAULTS:
                raise InvalidInputError(f"unknown family {family!r}; use one of {sorted(FAMILY_DEFAULTS)}")
            self.family = family
        t_default, p_default = FAMILY_DEFAULTS[self.family]
        self.loaded = loaded
        self.template = get_template(template if template is not None else t_default)
        self.pooling = pooling if pooling is not None else p_default
        if self.pooling not in POOLINGS:
            raise InvalidInputError(f"unknown pooling {self.pooling!r}; use one of {POOLINGS}")
        self.instructions = {
            "query": resolve_instruction(instruction),
            "document": resolve_instruction(document_instruction),
        }
        auto_tokens, auto_rows = batch_budget(loaded.model, loaded.device)
        batch_tokens = auto_tokens if batch_tokens is None else batch_tokens
        max_batch_size = auto_rows if max_batch_size is None else max_batch_size
        for nm, v in (("max_length", max_length), ("batch_tokens", batch_tokens), ("max_batch_size", max_batch_size)):
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise InvalidInputError(f"{nm} must be a positive int, got {v!r}")
        if padding_side not in ("left", "right"):
            raise InvalidInputError(f"padding_side must be 'left' or 'right', got {padding_side!r}")
        if empty not in ("zero", "error"):
            raise InvalidInputError(f"empty must be 'zero' or 'error', got {empty!r}")
        self.max_length = max_length
        self.batch_tokens = batch_tokens
        self.max_batch_size = max_batch_size
        self.padding_side = padding_side
        self.empty = empty
        self.progress = progress
        #: log each call's truncations (an EmbeddingCache turns this off while it encodes a
        #: corpus in parts, and logs one total instead)
        self.warn_truncation = True
        self.last_stats: dict[str, Any] = {}
        self._backbone = backbone(loaded.model)
        tok = loaded.tokenizer
        self._pad_id = tok.pad_token_id if tok.pad_token_id is not None else 0
        self._overhead: dict[str, int] = {}
        self.prefix_cache = bool(prefix_cache)
        self._prefix: dict[str, tuple[Any, PrefixCache]] = {}
        self.compile = bool(compile)
        self._compiled: tuple[Any, Any] | None = None

    # ------------------------------------------------------------------ fingerprint

    def fingerprint(self) -> dict[str, Any]:
        return {
            "format": FINGERPRINT_FORMAT,
            "family": self.family,
            "model": dict(self.loaded.identity),
            "dtype": str(self.loaded.dtype).replace("torch.", ""),
            "template": self.template.pattern,
            "pooling": self.pooling,
            "pool_span": "text" if self.pooling != "last" else "last-real-token",
            "query_instruction": self.instructions["query"],
            "document_instruction": self.instructions["document"],
            "instruction_separator": INSTRUCTION_SEPARATOR,
            "max_length": self.max_length,
            "empty": self.empty,
            **self.text_form_fingerprint(),
        }

    # ------------------------------------------------------------------ prompt preparation

    def _render(self, text: str, role: str) -> tuple[str, tuple[int, int]]:
        return self.template.render(text, self.instructions[role])

    def _template_overhead(self, role: str) -> int:
        """Tokens the template + instruction + special tokens take with an empty text."""
        if role not in self._overhead:
            prompt, _ = self._render("", role)
            self._overhead[role] = len(self.tokenizer(prompt, add_special_tokens=True)["input_ids"])
        return self._overhead[role]

    def text_budget(self, role: str = "document") -> int | None:
        """Tokens of a text that fit the prompt: ``max_length`` less the template, instruction
        and special tokens, per text slot of the template (what :meth:`prepare` keeps)."""
        return max(1, (self.max_length - self._template_overhead(role)) // self.template.n_slots)

    def prepare(self, texts: list[str], role: str) -> tuple[list[list[int]], list[list[int]], np.ndarray, int]:
        """Tokenize prompts. Returns (ids per text, pooled positions per text, empty mask, n truncated)."""
        tok = self.tokenizer
        empty = np.array([not t.strip() for t in texts], dtype=bool)
        budget = (self.max_length - self._template_overhead(role)) // self.template.n_slots
        if budget < 1:
            raise InvalidInputError(
                f"max_length={self.max_length} leaves no room for text: the {self.template.name!r} template "
                f"and instruction already take {self._template_overhead(role)} tokens"
            )
        live = [i for i in range(len(texts)) if not empty[i]]
        cut = {i: texts[i] for i in live}
        # the text's own length first (ids only); offsets only for the texts to cut
        lengths = encode_batch(tok, [texts[i] for i in live], add_special_tokens=False, offsets=False)
        over = [i for i, e in zip(live, lengths) if len(e) > budget]
        for i, e in zip(over, encode_batch(tok, [texts[i] for i in over], add_special_tokens=False, offsets=True)):
            cut[i] = texts[i][: e.offsets[budget - 1][1]]
        n_trunc = len(over)
        ids_out: list[list[int]] = [[] for _ in texts]
        pos_out: list[list[int]] = [[] for _ in texts]
        pending = live
        for _attempt in range(8):
            if not pending:
                break
            rendered = [self._render(cut[i], role) for i in pending]
            encodings = encode_batch(tok, [r[0] for r in rendered], add_special_tokens=True, offsets=True)
            retry = []
            for i, (prompt, (s, e)), enc in zip(pending, rendered, encodings):
                excess = len(enc) - self.max_length
                if excess > 0:  # token merges at the template boundary: shorten the text a bit more
                    cut[i] = self._shorten(cut[i], excess * self.template.n_slots)
                    retry.append(i)
                    continue
                ids_out[i] = enc.ids
                pos_out[i] = _span_positions(enc.offsets, s, e)
            pending = retry
        if pending:
            raise InvalidInputError(f"could not fit texts {pending[:5]} into max_length={self.max_length} tokens")
        return ids_out, pos_out, empty, n_trunc

    def _shorten(self, text: str, n_tokens: int) -> str:
        """``text`` cut by about ``n_tokens`` tokens, always strictly shorter. A character that
        is several byte-level tokens (``⁺``: two) has one offset span for all of them, so
        cutting at a token's end can keep the whole character; then cut at its start."""
        sub = self.tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
        keep = max(1, len(sub) - n_tokens)
        if len(sub) > keep:
            for end in (sub[keep - 1][1], sub[keep - 1][0]):
                if 0 < end < len(text):
                    return text[:end]
        return text[: max(1, len(text) // 2)] if len(text) > 1 else text

    # ------------------------------------------------------------------ batching

    def _batches(self, lengths: np.ndarray, order: np.ndarray) -> list[np.ndarray]:
        """Greedy batches over ``order`` (longest first) within the padded-token budget; a batch
        also closes before its padding would pass ``max_padding`` of its positions, so no batch
        (and no corpus) spends more than that share of its tokens on padding."""
        out, cur, cur_max, cur_sum = [], [], 0, 0
        for i in order:
            n = int(lengths[i])
            new_max = max(cur_max, n)
            size = new_max * (len(cur) + 1)
            if cur and (size > self.batch_tokens or len(cur) >= self.max_batch_size
                        or size - cur_sum - n > self.max_padding * size):
                out.append(np.array(cur))
                cur, new_max, cur_sum = [], n, 0
            cur.append(int(i))
            cur_max, cur_sum = new_max, cur_sum + n
        if cur:
            out.append(np.array(cur))
        return out

    def collate(self, ids: list[list[int]], pos: list[list[int]]):
        """Pad prompts into (input_ids, attention mask, position ids, pooled-position mask) [B, L]
        (built with numpy in one pass, so the CPU keeps ahead of a GPU)."""
        B = len(ids)
        lens = np.fromiter((len(x) for x in ids), dtype=np.int64, count=B)
        L = int(lens.max())
        offs = L - lens if self.padding_side == "left" else np.zeros(B, dtype=np.int64)
        cols = np.arange(L)
        real = (cols[None, :] >= offs[:, None]) & (cols[None, :] < (offs + lens)[:, None])
        input_ids = np.full((B, L), self._pad_id, dtype=np.int64)
        input_ids[real] = np.fromiter(itertools.chain.from_iterable(ids), dtype=np.int64, count=int(lens.sum()))
        plens = np.fromiter((len(p) for p in pos), dtype=np.int64, count=B)
        pmask = np.zeros((B, L), dtype=bool)
        rows = np.repeat(np.arange(B), plens)
        pmask[rows, np.fromiter(itertools.chain.from_iterable(pos), dtype=np.int64, count=int(plens.sum())) + offs[rows]] = True
        none = plens == 0  # text span not found (should not happen for non-empty text): use all real tokens
        pmask[none] = real[none]
        attn = real.astype(np.int64)
        position_ids = np.clip(attn.cumsum(1) - 1, 0, None)
        return (torch.from_numpy(input_ids), torch.from_numpy(attn), torch.from_numpy(position_ids),
                torch.from_numpy(pmask))

    def embed_with(self, model: torch.nn.Module, texts: list[str], role: str) -> torch.Tensor:
        """Embeddings [B, d] of ``texts`` read exactly as :meth:`encode_queries` / ``encode_documents``
        do (template, instruction, truncation, pooling) but through ``model`` (e.g. a peft model being
        trained) and with gradients: the differentiable forward of the InfoNCE baseline (one batch;
        an empty text is pooled over its prompt's tokens instead of getting a zero vector)."""
        ids, pos, _, _ = self.prepare([clean_text(t) for t in texts], role)
        dev = model.get_input_embeddings().weight.device
        net = backbone(model)

        def forward(group: list[int]) -> torch.Tensor:  # texts of similar length in one forward each
            input_ids, attn, position_ids, pmask = self.collate([ids[i] for i in group], [pos[i] for i in group])
            out = net(input_ids=input_ids.to(dev), attention_mask=attn.to(dev), position_ids=position_ids.to(dev),
                      use_cache=False)
            return pool(self.pooling, out.last_hidden_state, attn.to(dev), pmask.to(dev))

        return in_length_groups([len(x) for x in ids], dev, forward)

    def _full_forward_module(self):
        """The backbone that runs full forwards: ``torch.compile``'d once per backbone when
        ``compile`` is on (an ONNX Runtime backbone is no torch module and runs as it is)."""
        if not self.compile or not isinstance(self._backbone, torch.nn.Module):
            return self._backbone
        if self._compiled is None or self._compiled[0] is not self._backbone:
            self._compiled = (self._backbone, torch.compile(self._backbone, dynamic=True))
        return self._compiled[1]

    def _forward(self, input_ids, attn, position_ids) -> torch.Tensor:
        dev = self.loaded.device
        out = self._full_forward_module()(
            input_ids=input_ids.to(dev),
            attention_mask=attn.to(dev),
            position_ids=position_ids.to(dev),
            use_cache=False,
        )
        return out.last_hidden_state if hasattr(out, "last_hidden_state") else out[0]

    def _prefix_cache(self, role: str) -> PrefixCache:
        """The KV cache of the role's fixed prompt prefix (instruction + template head, special
        tokens included), computed once per role and backbone (encoders.prefix_cache)."""
        held = self._prefix.get(role)
        if held is None or held[0] is not self._backbone:
            prompt = self.template.prefix(self.instructions[role])
            ids = self.tokenizer(prompt, add_special_tokens=True)["input_ids"]
            # an int8 embedder keeps its fp32 backbone for the prefix (encoders.quantize)
            fp32 = getattr(self, "_prefix_backbone", None) or self._backbone
            held = (self._backbone, PrefixCache(fp32, ids, self.loaded.device))
            self._prefix[role] = held
        return held[1]

    # ------------------------------------------------------------------ encode

    def _encode(self, texts: list[str], role: str, progress: bool | None = None, **kw) -> np.ndarray:
        if role not in ROLES:
            raise InvalidInputError(f"role must be one of {ROLES}, got {role!r}")
        if kw:
            raise InvalidInputError(f"unknown encode options: {sorted(kw)}")
        texts = check_texts(texts)
        t0 = time.perf_counter()
        n = len(texts)
        out = np.zeros((n, self.dim), dtype=np.float32)
        stats = {"n_texts": n, "n_empty": 0, "n_truncated": 0, "n_tokens": 0, "n_padded_tokens": 0, "n_batches": 0,
                 "n_prefix_cached": 0}
        if n == 0:
            self.last_stats = {**stats, "seconds": 0.0}
            return out
        cleaned = [clean_text(t) for t in texts]
        empty = np.array([not t.strip() for t in cleaned], dtype=bool)
        stats["n_empty"] = int(empty.sum())
        if stats["n_empty"] and self.empty == "error":
            where = np.flatnonzero(empty)[:10].tolist()
            raise InvalidInputError(f"{stats['n_empty']} empty or whitespace-only texts (positions {where}...)")
        # beside a GPU the texts are tokenized in steps, the next step on a thread while the GPU
        # encodes this one; on a CPU the model's matmuls take the cores, so one step
        size = self._step_texts(n)
        steps = [(a, min(n, a + size)) for a in range(0, n, size)]
        show = self.progress if progress is None else progress
        bar = tqdm(total=int((~empty).sum()), desc=f"encode {role}s ({self.family})", unit="text",
                   disable=not show or n <= self.max_batch_size)
        pending: list[tuple[np.ndarray, torch.Tensor]] = []  # pooled rows not yet copied back

        def copy_back() -> None:
            for rows_done, vectors in pending:
                out[rows_done] = vectors.float().cpu().numpy()
            pending.clear()

        with ThreadPoolExecutor(max_workers=1) as tokenizer_thread, torch.inference_mode():
            pc = self._prefix_cache(role) if self.prefix_cache else None
            ahead = tokenizer_thread.submit(self.prepare, cleaned[steps[0][0]:steps[0][1]], role)
            for k, (first, _last) in enumerate(steps):
                ids, pos, step_empty, n_trunc = ahead.result()
                if k + 1 < len(steps):
                    ahead = tokenizer_thread.submit(self.prepare, cleaned[steps[k + 1][0]:steps[k + 1][1]], role)
                stats["n_truncated"] += n_trunc
                live = np.flatnonzero(~step_empty)
                lengths = np.array([len(x) for x in ids])
                order = live[np.argsort(-lengths[live], kind="stable")]
                for batch in self._batches(lengths, order):
                    launched = self._run_batch(batch, ids, pos, pc, stats)
                    # the previous batch is copied back while this one runs (a GPU works
                    # asynchronously; on a CPU this is the same as copying at once)
                    copy_back()
                    pending.extend((rows + first, h) for rows, h in launched)
                    bar.update(len(batch))
            copy_back()
        bar.close()
        if stats["n_truncated"] and self.warn_truncation:
            log.warning(TRUNCATION_WARNING, stats["n_truncated"], n, role, self.max_length)
        stats["seconds"] = time.perf_counter() - t0
        self.last_stats = stats
        return out

    def _step_texts(self, n: int) -> int:
        """Texts tokenized per step of an encode of ``n`` texts (see :meth:`_encode`)."""
        return GPU_STEP_TEXTS if self.loaded.device.type == "cuda" else n

    def _run_batch(self, batch: np.ndarray, ids: list[list[int]], pos: list[list[int]], pc: PrefixCache | None,
                   stats: dict) -> list[tuple[np.ndarray, torch.Tensor]]:
        """Run one batch (rows ``batch`` of a step) and return its pooled vectors, still on the
        device: prompts that begin with the cached prefix run on it, the others in full."""
        cached = np.array([pc is not None and pc.covers(ids[i], pos[i]) for i in batch], dtype=bool)
        launched = []
        for b, on_cache in ((batch[cached], True), (batch[~cached], False)):
            if not b.size:
                continue
            rows, rpos = [ids[i] for i in b], [pos[i] for i in b]
            if on_cache:  # only the tokens after the fixed prefix run
                input_ids, attn, _, pmask = self.collate([x[pc.n:] for x in rows], [[j - pc.n for j in p] for p in rpos])
                hidden = pc.forward(self._backbone, input_ids, attn)
                attn_on = _to_device(attn, hidden.device)
                stats["n_prefix_cached"] += len(b)
            else:
                input_ids, attn, position_ids, pmask = self.collate(rows, rpos)
                dev = self.loaded.device
                attn_on = _to_device(attn, dev)  # moved once: the forward and the pooling share it
                hidden = self._forward(_to_device(input_ids, dev), attn_on, _to_device(position_ids, dev))
            # collate gives every row a real token and a pooled position, so pooling need not
            # check (and on a GPU wait for) the masks
            launched.append((b, pool(self.pooling, hidden, attn_on, _to_device(pmask, hidden.device),
                                     validate=False)))
            stats["n_tokens"] += int(attn.sum())
            stats["n_padded_tokens"] += int(attn.numel())
            stats["n_batches"] += 1
        return launched


class PromptEOLEmbedder(PromptEmbedder):
    """PromptEOL template + last-token pooling (“A Text is Worth Several Tokens” §2.2)."""

    family = "prompteol"


class LastTokenEmbedder(PromptEmbedder):
    """Raw text, last real token (“A Text is Worth Several Tokens” eq.3, last pooling)."""

    family = "last"


class MeanEmbedder(PromptEmbedder):
    """Raw text, mean over the text's tokens (“A Text is Worth Several Tokens” eq.3, α_j = 1/L)."""

    family = "mean"


class WeightedMeanEmbedder(PromptEmbedder):
    """Raw text, position-weighted mean (“A Text is Worth Several Tokens” eq.3, α_j = j/Σj)."""

    family = "weighted-mean"


class EchoEmbedder(PromptEmbedder):
    """Echo template, mean over the second copy of the text (“A Text is Worth Several Tokens” §2.2, Springer et al.)."""

    family = "echo"
