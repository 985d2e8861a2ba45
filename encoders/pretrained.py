"""Public retrieval-trained LLM embedders: how each is loaded and read, and the loader behind them.

A :class:`PretrainedProfile` says everything a published LLM embedder needs beyond its weights:
its pooling (last token or mean), the prompt of queries (with the task instruction) and of
documents, the padding side, whether it attends bidirectionally, a token appended to every
prompt, PEFT adapters merged over a base, and where its LM head E_g comes from. ``PRETRAINED``
names the known ones; the ``pretrained`` embedder family (encoders.embedders.pretrained) reads
a profile, and any Hugging Face folder or hub id can be read with explicit options instead.

The LM head the aligned tokens are read through (“A Text is Worth Several Tokens” §2, eq.1):

- the checkpoint's own ``lm_head`` when it has one;
- the input-embedding matrix when the checkpoint dropped ``lm_head`` (saved as ``AutoModel``)
  and its config ties the two (``tie_word_embeddings``);
- the head of another model (``lm_head_from``: a folder, hub id or registered name, usually the
  base model the embedder was trained from) when the checkpoint has none of its own and is untied;
  only that tensor is read from a safetensors folder or hub repository.
  ``lm_head_from="input"`` takes the input embeddings of an untied model deliberately.

A model spec carries these loading choices as ``SOURCE?lm_head_from=BASE&adapters=A,B`` (see
:func:`with_lm_head`), so an index's manifest, which records the spec, rebuilds the same model.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, quote, urlencode

import torch

from alignir.errors import InvalidInputError

log = logging.getLogger(__name__)

__all__ = ["PretrainedProfile", "PRETRAINED", "HEAD_INPUT", "parse_spec", "with_lm_head", "is_pretrained_spec",
           "load_pretrained", "read_head", "missing_head_error", "bidirectional_attention", "profile_of"]

#: ``lm_head_from`` value that takes the model's own input-embedding matrix as E_g
HEAD_INPUT = "input"

_SPEC_KEYS = ("lm_head_from", "adapters")


@dataclass(frozen=True)
class PretrainedProfile:
    """How one public LLM embedder is loaded and read (see the module docstring)."""

    name: str
    source: str  # hub id of the weights (or of the base when ``adapters`` are merged over it)
    pooling: str  # "last" | "mean" (mean: over the text's own tokens, instruction excluded)
    query_template: str  # with {instruction} and {text}; used when a query instruction is set
    document_template: str = "{text}"  # documents, and queries without an instruction
    instruction: str | None = None  # the default query task instruction
    padding_side: str = "right"
    bidirectional: bool = False
    append_token: str | None = None  # appended to every prompt unless the tokenizer adds it itself
    adapters: tuple[str, ...] = ()  # PEFT adapters merged into the backbone, in order
    lm_head_from: str | None = None  # the base model whose LM head the aligned tokens use
    description: str = ""
    facts: tuple[str, ...] = field(default=(), compare=False)  # where the settings were read


_WEB = "Given a web search query, retrieve relevant passages that answer the query"

PRETRAINED: dict[str, PretrainedProfile] = {
    "qwen3-embedding-0.6b": PretrainedProfile(
        name="qwen3-embedding-0.6b", source="Qwen/Qwen3-Embedding-0.6B", pooling="last",
        query_template="Instruct: {instruction}\nQuery:{text}", instruction=_WEB, padding_side="left",
        append_token="<|endoftext|>",
        description="Qwen3-Embedding 0.6B (d 1024): last token, left padding; head tied to the input embeddings",
        facts=("model card: get_detailed_instruct = 'Instruct: {task}\\nQuery:{query}', last_token_pool, "
               "padding_side='left'", "1_Pooling/config.json: pooling_mode_lasttoken")),
    "qwen3-embedding-4b": PretrainedProfile(
        name="qwen3-embedding-4b", source="Qwen/Qwen3-Embedding-4B", pooling="last",
        query_template="Instruct: {instruction}\nQuery:{text}", instruction=_WEB, padding_side="left",
        append_token="<|endoftext|>",
        description="Qwen3-Embedding 4B (d 2560): as 0.6B; head tied to the input embeddings"),
    "qwen3-embedding-8b": PretrainedProfile(
        name="qwen3-embedding-8b", source="Qwen/Qwen3-Embedding-8B", pooling="last",
        query_template="Instruct: {instruction}\nQuery:{text}", instruction=_WEB, padding_side="left",
        append_token="<|endoftext|>", lm_head_from="Qwen/Qwen3-8B",
        description="Qwen3-Embedding 8B (d 4096): as 0.6B; untied, so the head is Qwen3-8B's"),
    "gte-qwen2-1.5b-instruct": PretrainedProfile(
        name="gte-qwen2-1.5b-instruct", source="Alibaba-NLP/gte-Qwen2-1.5B-instruct", pooling="last",
        query_template="Instruct: {instruction}\nQuery: {text}", instruction=_WEB, padding_side="left",
        append_token="<|endoftext|>",
        description="gte-Qwen2-1.5B-instruct (d 1536): last token; head tied to the input embeddings",
        facts=("mteb gte_models.py: instruction_template 'Instruct: {instruction}\\nQuery: ', "
               "pooling_method 'lasttoken', attn 'cccc'",)),
    "gte-qwen2-7b-instruct": PretrainedProfile(
        name="gte-qwen2-7b-instruct", source="Alibaba-NLP/gte-Qwen2-7B-instruct", pooling="last",
        query_template="Instruct: {instruction}\nQuery: {text}", instruction=_WEB, padding_side="left",
        append_token="<|endoftext|>", lm_head_from="Qwen/Qwen2-7B-Instruct",
        description="gte-Qwen2-7B-instruct (d 3584): last token; untied, so the head is Qwen2-7B-Instruct's"),
    "e5-mistral-7b-instruct": PretrainedProfile(
        name="e5-mistral-7b-instruct", source="intfloat/e5-mistral-7b-instruct", pooling="last",
        query_template="Instruct: {instruction}\nQuery: {text}", instruction=_WEB, padding_side="left",
        append_token="</s>", lm_head_from="mistralai/Mistral-7B-v0.1",
        description="e5-mistral-7b-instruct (d 4096): last token, EOS appended; saved without lm_head "
                    "and untied, so the head is Mistral-7B-v0.1's",
        facts=("model card: 'Instruct: {task_description}\\nQuery: {query}', EOS id appended to every "
               "input, last_token_pool",)),
    "gritlm-7b": PretrainedProfile(
        name="gritlm-7b", source="GritLM/GritLM-7B", pooling="mean",
        query_template="<|user|>\n{instruction}\n<|embed|>\n{text}", document_template="<|embed|>\n{text}",
        instruction=_WEB, bidirectional=True,
        description="GritLM-7B (d 4096): bidirectional attention, mean over the text; a full causal LM, "
                    "so its own head",
        facts=("gritlm README: gritlm_instruction = '<|user|>\\n' + instruction + '\\n<|embed|>\\n' if "
               "instruction else '<|embed|>\\n'; GritLM(pooling_method='mean', attn='bbcc')",)),
    "llm2vec-mistral-7b-supervised": PretrainedProfile(
        name="llm2vec-mistral-7b-supervised", source="mistralai/Mistral-7B-Instruct-v0.2", pooling="mean",
        query_template="{instruction} {text}", document_template=" {text}",
        instruction=_WEB + ":", padding_side="left", bidirectional=True,
        adapters=("McGill-NLP/LLM2Vec-Mistral-7B-Instruct-v2-mntp",
                  "McGill-NLP/LLM2Vec-Mistral-7B-Instruct-v2-mntp-supervised"),
        description="LLM2Vec over Mistral-7B-Instruct-v0.2: MNTP then supervised LoRA merged, bidirectional, "
                    "mean over the text; the head is the base's (untied)",
        facts=("llm2vec.py: _convert_to_str = f'{instruction.strip()} !@#$%^&*(){text}', the separator "
               "removed before tokenizing, mean over the text's tokens (skip_instruction), left padding; "
               "MNTP adapter merged into the base, supervised adapter on top",)),
}


def profile_of(name: str | None) -> PretrainedProfile | None:
    """The registered profile called ``name`` (case-insensitive), or None."""
    return PRETRAINED.get(name.strip().lower()) if isinstance(name, str) else None


# --------------------------------------------------------------------------- spec strings

def parse_spec(spec: str) -> tuple[str, dict[str, Any]]:
    """``SOURCE?lm_head_from=BASE&adapters=A,B`` -> (SOURCE, {"lm_head_from": BASE, "adapters": (A, B)})."""
    source, sep, query = spec.partition("?")
    params: dict[str, Any] = {}
    if sep:
        for key, value in parse_qsl(query, keep_blank_values=True):
            if key not in _SPEC_KEYS:
                raise InvalidInputError(f"model spec {spec!r}: unknown parameter {key!r}; known: {', '.join(_SPEC_KEYS)}")
            if not value:
                raise InvalidInputError(f"model spec {spec!r}: parameter {key!r} is empty")
            params[key] = tuple(v for v in value.split(",") if v) if key == "adapters" else value
    if not source.strip():
        raise InvalidInputError(f"model spec {spec!r} names no model before '?'")
    return source.strip(), params


def with_lm_head(spec: str, lm_head_from: str | os.PathLike | None) -> str:
    """``spec`` that loads with the LM head of ``lm_head_from`` (a folder, hub id, registered
    name or ``"input"``); unchanged when it is None. Local paths are made absolute, so an index's
    manifest finds them from any working directory."""
    if lm_head_from is None or str(lm_head_from).strip() == "":
        return spec
    base = str(lm_head_from).strip()
    if base != HEAD_INPUT and Path(base).expanduser().exists():
        base = str(Path(base).expanduser().resolve())
    source, params = parse_spec(spec)
    if Path(source).expanduser().exists():
        source = str(Path(source).expanduser().resolve())
    params["lm_head_from"] = base
    return _join(source, params)


def _join(source: str, params: dict[str, Any]) -> str:
    items = [(k, ",".join(v) if isinstance(v, tuple) else v) for k, v in params.items() if v]
    return source + ("?" + urlencode(items, quote_via=quote, safe="/:@,.-_~") if items else "")


def is_pretrained_spec(spec: str) -> bool:
    """A registered profile name, or a spec with loading parameters (``?lm_head_from=...``)."""
    return profile_of(spec) is not None or "?" in spec


# --------------------------------------------------------------------------- attention

class bidirectional_attention:
    """Context manager: ``model`` attends bidirectionally inside the block (LLM2Vec, GritLM).

    transformers builds a bidirectional mask when the config says ``is_causal=False``
    (masking_utils.create_causal_mask), and SDPA reads each attention module's ``is_causal``
    when no mask is materialised; both are switched for the block and restored after it."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.model = model
        self._saved: list[tuple[Any, Any]] = []

    def __enter__(self) -> torch.nn.Module:
        configs = {id(m.config): m.config for m in self.model.modules() if getattr(m, "config", None) is not None}
        for cfg in configs.values():
            self._saved.append((cfg, getattr(cfg, "is_causal", _UNSET)))
            cfg.is_causal = False
        for m in self.model.modules():
            if isinstance(getattr(m, "is_causal", None), bool):
                self._saved.append((m, m.is_causal))
                m.is_causal = False
        return self.model

    def __exit__(self, *exc: Any) -> None:
        for obj, value in reversed(self._saved):
            if value is _UNSET:
                with contextlib.suppress(AttributeError):
                    delattr(obj, "is_causal")
            else:
                obj.is_causal = value
        self._saved.clear()


_UNSET = object()


# --------------------------------------------------------------------------- heads

def _tensor_sha256(t: torch.Tensor) -> str:
    return hashlib.sha256(t.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes()).hexdigest()


def _tied(config: dict[str, Any]) -> bool:
    text = config.get("text_config") if isinstance(config.get("text_config"), dict) else {}
    return bool(config.get("tie_word_embeddings", text.get("tie_word_embeddings", False)))


def _hub_file(repo: str, name: str, revision: str | None) -> Path | None:
    from huggingface_hub import hf_hub_download
    from huggingface_hub.errors import EntryNotFoundError

    try:
        return Path(hf_hub_download(repo, name, revision=revision))
    except EntryNotFoundError:
        return None


def read_head(spec: str, *, device: torch.device, dtype: torch.dtype) -> tuple[torch.Tensor, dict[str, Any]]:
    """The LM head [V, d] of the model ``spec`` and where it came from.

    A Hugging Face folder or hub id with safetensors weights: only the ``lm_head.weight`` tensor
    (or the input embeddings of a tied model) is read. Anything else (registered name, .gguf):
    the model is loaded and its output embeddings taken."""
    from safetensors import safe_open

    repo, _, rev = spec.partition("@")
    folder = Path(repo).expanduser()
    files: dict[str, Path | None] = {}

    def get(name: str) -> Path | None:
        if name not in files:
            if folder.is_dir():
                files[name] = folder / name if (folder / name).is_file() else None
            else:
                files[name] = _hub_file(repo, name, rev or None)
        return files[name]

    local = folder.is_dir() and (folder / "config.json").is_file()
    from alignir.encoders.models import _HUB_ID, REGISTERED_MODELS

    if local or (not folder.exists() and _HUB_ID.match(spec) and spec.lower() not in REGISTERED_MODELS):
        config = json.loads(get("config.json").read_text()) if get("config.json") else {}
        index = get("model.safetensors.index.json")
        if index is not None:
            weight_map: dict[str, str] = json.loads(index.read_text())["weight_map"]
        elif get("model.safetensors") is not None:
            with safe_open(str(get("model.safetensors")), framework="pt") as fh:
                weight_map = {k: "model.safetensors" for k in fh.keys()}
        else:
            weight_map = {}
        if weight_map:
            names = [k for k in weight_map if k.endswith("lm_head.weight")]
            kind = "lm_head"
            if not names and _tied(config):
                names = [k for k in weight_map if k.endswith("embed_tokens.weight")]
                kind = "tied input embeddings"
            if not names:
                raise InvalidInputError(f"--lm-head-from {spec}: its weights have no lm_head.weight "
                                        f"(and it does not tie its head to its input embeddings)")
            key = sorted(names, key=len)[0]
            with safe_open(str(get(weight_map[key])), framework="pt") as fh:
                W = fh.get_tensor(key)
            return W.to(device=device, dtype=dtype), {"from": spec, "tensor": key, "kind": kind,
                                                      "sha256": _tensor_sha256(W)}
    from alignir.encoders.models import load_model

    other = load_model(spec, device="cpu", dtype=dtype)
    W = other.lm_head.detach().clone()
    return W.to(device=device), {"from": spec, "tensor": "output embeddings", "kind": "lm_head",
                                 "sha256": _tensor_sha256(W)}


def missing_head_error(source: str) -> InvalidInputError:
    return InvalidInputError(
        f"{source} has no lm_head weights and its config does not tie the head to the input embeddings, so the "
        f"aligned tokens have no LM head: pass --lm-head-from BASE (Python: load_model(spec, lm_head_from=BASE)), "
        f"BASE = the model it was trained from, or --lm-head-from {HEAD_INPUT} for its input embeddings")


def head_missing(model: torch.nn.Module, loading_info: dict[str, Any]) -> bool:
    """Whether ``model``'s LM head was left at its random initialisation by ``from_pretrained``
    (the checkpoint had no ``lm_head`` and the model does not tie it to the input embeddings)."""
    missing = [k for k in loading_info.get("missing_keys", ()) if k.endswith("lm_head.weight")]
    if not missing:
        return False
    head, emb = model.get_output_embeddings(), model.get_input_embeddings()
    return head is None or emb is None or head.weight.data_ptr() != emb.weight.data_ptr()


# --------------------------------------------------------------------------- loading

def load_pretrained(spec: str, device: torch.device, dtype: torch.dtype):
    """Load ``spec`` (a registered profile name, or ``SOURCE?lm_head_from=..&adapters=..``) as a
    LoadedModel whose ``lm_head`` is the right E_g (see the module docstring)."""
    from alignir.encoders.models import _tokenizer_sha256, _weights_sha256, load_model, wrap_model
    from alignir.errors import ModelNotFoundError

    profile = profile_of(spec)
    if profile is not None:
        source, params = profile.source, {"lm_head_from": profile.lm_head_from, "adapters": profile.adapters}
    else:
        source, params = parse_spec(spec)
        profile = profile_of(source)
        if profile is not None:  # a registered name with an explicit head or adapters
            params = {"lm_head_from": profile.lm_head_from, "adapters": profile.adapters, **params}
            source = profile.source
    head_from: str | None = params.get("lm_head_from")
    adapters: tuple[str, ...] = tuple(params.get("adapters") or ())

    from transformers import AutoModelForCausalLM, AutoTokenizer

    repo, _, rev = source.partition("@")
    folder = Path(repo).expanduser()
    kw: dict[str, Any] = {"revision": rev} if rev else {}
    if folder.is_file():  # a .gguf file: alignir's own loader, then the head
        if adapters:
            raise InvalidInputError(f"model spec {spec!r}: adapters are merged into Hugging Face models only")
        loaded = load_model(str(folder), device=device, dtype=dtype)
        return _with_head(loaded, head_from, device, profile)
    try:
        tok = AutoTokenizer.from_pretrained(str(folder) if folder.is_dir() else repo, **kw)
        model, info = AutoModelForCausalLM.from_pretrained(str(folder) if folder.is_dir() else repo, dtype=dtype,
                                                           output_loading_info=True, **kw)
    except OSError as e:
        raise ModelNotFoundError(f"cannot load model {source!r} (from spec {spec!r}): {str(e).splitlines()[0][:200]}") from None
    if folder.is_dir():
        identity: dict[str, Any] = {"name": folder.name, "source": str(folder.resolve()), "sha256": _weights_sha256(folder)}
        tsha = _tokenizer_sha256(folder)
        if tsha:
            identity["tokenizer_sha256"] = tsha
    else:
        identity = {"name": repo, "source": f"hub:{repo}", "revision": getattr(model.config, "_commit_hash", None) or rev or None}
    if profile is not None:
        identity["profile"] = profile.name
    if adapters:
        model, identity["adapters"] = _merge_adapters(model, adapters)
    if head_from is None and head_missing(model, info):
        raise missing_head_error(source)
    loaded = wrap_model(identity["name"], tok, model, identity, device)
    return _with_head(loaded, head_from, device, profile)


def _with_head(loaded, head_from: str | None, device: torch.device, profile: PretrainedProfile | None):
    """``loaded`` with the LM head taken from ``head_from`` (None: its own, recorded as such)."""
    from dataclasses import replace

    from alignir.encoders.models import find_special_ids

    identity = dict(loaded.identity)
    if profile is not None:
        identity.setdefault("profile", profile.name)
    if head_from is None:
        identity["lm_head"] = {"from": "checkpoint"}
        return replace(loaded, identity=identity)
    if head_from == HEAD_INPUT:
        W = loaded.model.get_input_embeddings().weight.detach()
        meta = {"from": HEAD_INPUT, "sha256": _tensor_sha256(W)}
    else:
        W, meta = read_head(head_from, device=loaded.device, dtype=loaded.dtype)
    rows = loaded.model.get_input_embeddings().weight.shape[0]
    if W.dim() != 2 or W.shape[1] != loaded.hidden_size or W.shape[0] != rows:
        raise InvalidInputError(f"--lm-head-from {head_from}: its head has shape {tuple(W.shape)}, the model needs "
                                f"[{rows}, {loaded.hidden_size}] (vocabulary x hidden size); use the base model "
                                f"this embedder was trained from")
    identity["lm_head"] = meta
    identity["vocab"] = int(W.shape[0])
    return replace(loaded, lm_head=W, special_ids=find_special_ids(loaded.tokenizer, int(W.shape[0])),
                   identity=identity)


def _merge_adapters(model: torch.nn.Module, adapters: tuple[str, ...]) -> tuple[torch.nn.Module, list[dict[str, Any]]]:
    """Merge PEFT LoRA adapters into the transformer backbone, in order (LLM2Vec: MNTP, then the
    supervised adapter), as the adapters were trained on the backbone (AutoModel)."""
    from peft import PeftModel

    from alignir.encoders.models import _files_sha256, backbone

    records = []
    inner = backbone(model)
    for a in adapters:
        path = Path(a).expanduser()
        peft = PeftModel.from_pretrained(inner, str(path) if path.is_dir() else a)
        merged = peft.merge_and_unload()
        if merged is not inner:
            raise InvalidInputError(f"adapter {a}: merging it did not return the backbone it was loaded on")
        rec: dict[str, Any] = {"source": str(path.resolve()) if path.is_dir() else f"hub:{a}"}
        if path.is_dir():
            rec["sha256"] = _files_sha256(sorted(p for p in path.iterdir() if p.is_file() and p.name.startswith("adapter")))
        records.append(rec)
    return model, records
