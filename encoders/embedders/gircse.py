"""GIRCSE embedder (GIRCSE §3.1-3.2, Algorithm 1).

K soft tokens are generated autoregressively through the LM head:
s_k = softmax(W_φ h'_{k-1} + b_φ) (eq.5), d_k = Σ_i s_{k,i} e_i (eq.6), appended to the input;
the embedding is the mean of the generated positions' final hidden states G = (h_{N+1}..h_{N+K})
(eq.4). With the KV cache (App. D) the K steps cost one pass over the text plus K one-token
steps; ``use_cache=False`` re-runs f_θ([X; D]) at every step exactly as Algorithm 1 writes it.
K is an inference option (paper: K=5 in training, K=20 at test time, App. C; quality rises with K
at test time, §5.1). Without an adapter K defaults to 20; an adapter that records its training K
(in ``embedder_options``, as ``alignir train gircse`` writes) reads at that K by default, since at
our scale quality peaks at the training K and falls beyond it (the K sweep in the README); ``K=`` overrides.

Input format (``prompt``): ``"instruct"`` (default) is the paper's query format
``Instruct: {task}\nQuery: {q}`` (§4.1 "Training Details", following E5-Mistral; documents take no
instruction, App. J Table 11); ``"prompteol"`` wraps every text in the PromptEOL template
(``This sentence: "{text}" means in one word: "``, “A Text is Worth Several Tokens” §2.2) with the
instruction line in front of queries; ``"plain"`` is instruction line + raw text (the readout of
adapters trained before the option existed, which therefore read ``plain``).
"""
from __future__ import annotations

from alignir.errors import InvalidInputError

import torch

from alignir.encoders.templates import INSTRUCTION_SEPARATOR, resolve_instruction
from alignir.encoders.embedders.trained import TrainedEmbedder
from alignir.encoders.embedders.generative import bos_ids, input_embeddings, left_pad, pad_id, position_ids, run_backbone, token_ids

__all__ = ["GircseEmbedder", "generate_soft_tokens", "gircse_input_ids", "PROMPTS"]

#: input formats of :func:`gircse_input_ids`
PROMPTS = ("instruct", "prompteol", "plain")
_EOL_HEAD, _EOL_TAIL = 'This sentence: "', '" means in one word: "'


def gircse_input_ids(tokenizer, text: str, instruction: str | None, max_length: int, prompt: str = "plain") -> list[int]:
    """Token ids of one text (truncated to ``max_length`` tokens) in the ``prompt`` format; pass
    ``instruction`` for queries only. ``instruct``: ``Instruct: {instruction}\nQuery: {text}`` (GIRCSE
    §4.1), the raw text when there is no instruction."""
    if prompt not in PROMPTS:
        raise InvalidInputError(f"unknown GIRCSE prompt {prompt!r}; use one of {PROMPTS}")
    if prompt == "instruct":
        if not instruction:
            return bos_ids(tokenizer) + token_ids(tokenizer, text, max_length)
        # the text keeps its leading space (" word" as in running text, not a lone space token)
        pre = token_ids(tokenizer, f"Instruct: {instruction}\nQuery:")
        return bos_ids(tokenizer) + pre + token_ids(tokenizer, " " + text, max_length)
    body = token_ids(tokenizer, text, max_length)
    pre = token_ids(tokenizer, instruction + INSTRUCTION_SEPARATOR) if instruction else []
    if prompt == "prompteol":
        return bos_ids(tokenizer) + pre + token_ids(tokenizer, _EOL_HEAD) + body + token_ids(tokenizer, _EOL_TAIL)
    return bos_ids(tokenizer) + pre + body


def _head(model) -> tuple[torch.Tensor, torch.Tensor | None]:
    head = model.get_output_embeddings()
    return head.weight, getattr(head, "bias", None)


def _soft(h: torch.Tensor, W: torch.Tensor, b: torch.Tensor | None, E: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(s_k [B, V], d_k [B, d]) from h'_{k-1} [B, d] (eq.5, eq.6)."""
    logits = h @ W.T
    if b is not None:
        logits = logits + b
    s = torch.softmax(logits.float(), dim=-1)
    return s, (s.to(E.dtype) @ E)


def generate_soft_tokens(model, ids: torch.Tensor, mask: torch.Tensor, K: int, use_cache: bool = True,
                         return_soft: bool = False):
    """Algorithm 1 on left-padded ``ids``: returns G [B, K, d] (and S [B, K, V] with ``return_soft``).

    G[:, j] = h_{N+1+j}, the final hidden state at the position of the (j+1)-th generated token.
    """
    if K < 1:
        raise InvalidInputError(f"K (generated soft tokens) must be >= 1, got {K}")
    W, b = _head(model)
    E = input_embeddings(model).weight
    X = input_embeddings(model)(ids)
    B = X.shape[0]
    ones = torch.ones((B, 1), dtype=mask.dtype, device=mask.device)
    G, S, D = [], [], []
    if use_cache:
        from transformers import DynamicCache

        cache = DynamicCache()
        out = run_backbone(model, X, mask, position_ids(mask), past_key_values=cache, use_cache=True)
        h = out.last_hidden_state[:, -1]
        cur_mask = mask
        for _ in range(K):
            s, d = _soft(h, W, b, E)
            S.append(s)
            cur_mask = torch.cat([cur_mask, ones], dim=1)
            pos = position_ids(cur_mask)[:, -1:]
            out = run_backbone(model, d.unsqueeze(1).to(X.dtype), cur_mask, pos, past_key_values=cache, use_cache=True)
            h = out.last_hidden_state[:, -1]
            G.append(h)
    else:
        h = run_backbone(model, X, mask, position_ids(mask)).last_hidden_state[:, -1]
        for k in range(K):
            s, d = _soft(h, W, b, E)
            S.append(s)
            D.append(d.to(X.dtype))
            full = torch.cat([X, torch.stack(D, 1)], dim=1)
            m = torch.cat([mask] + [ones] * len(D), dim=1)
            H = run_backbone(model, full, m, position_ids(m)).last_hidden_state
            h = H[:, -1]
        G = list(H[:, -K:].unbind(1))
    Gt = torch.stack(G, dim=1)
    return (Gt, torch.stack(S, dim=1)) if return_soft else Gt


class GircseEmbedder(TrainedEmbedder):
    """``get_embedder("gircse", model, K=20, use_cache=True, prompt="instruct", adapter=DIR, instruction=...)``."""

    family = "gircse"
    soft_key = None
    OPTIONS = {"K": 20, "use_cache": True, "prompt": "instruct"}
    LEGACY_OPTIONS = {"prompt": "plain"}

    def validate_options(self) -> None:
        if int(self.options["K"]) < 1:
            raise InvalidInputError(f"K (generated soft tokens) must be >= 1, got {self.options['K']}")
        if self.options["prompt"] not in PROMPTS:
            raise InvalidInputError(f"unknown GIRCSE prompt {self.options['prompt']!r}; use one of {PROMPTS}")

    def fingerprint(self):
        fp = super().fingerprint()
        fp["options"].pop("use_cache", None)  # exact either way: does not change the vectors
        if fp["options"].get("prompt") == "plain" or (fp["options"].get("prompt") == "instruct" and not self.instruction):
            fp["options"].pop("prompt", None)  # the same token ids as before the option existed
        return fp

    def embed_batch(self, texts: list[str], role: str) -> torch.Tensor:
        instr = resolve_instruction(self.instruction) if role == "query" else None
        rows = [gircse_input_ids(self.tokenizer, t, instr, self.max_length, self.options["prompt"]) for t in texts]
        dev = input_embeddings(self.model).weight.device
        ids, mask = left_pad(rows, pad_id(self.tokenizer), dev)
        G = generate_soft_tokens(self.model, ids, mask, int(self.options["K"]), bool(self.options["use_cache"]))
        return G.float().mean(1)  # eq.4, mean pooling
