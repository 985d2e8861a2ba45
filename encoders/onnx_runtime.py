"""The prompt embedders' transformer backbone run by ONNX Runtime, fp32 or dynamically int8.

The backbone (a trained LoRA adapter merged into its private copy of the weights first:
``merge_and_unload``) is exported once with ``torch.onnx.export`` — inputs ``input_ids``,
``attention_mask``, ``position_ids`` [batch, length], output ``last_hidden_state`` [batch,
length, d], batch and length dynamic — and kept on disk under ``cache_dir()/onnx/KEY/`` with KEY
a hash of the encoder fingerprint's model part (model identity and file hashes, adapter sha256),
so a second encoder of the same model reuses the file. The int8 file is
``onnxruntime.quantization.quantize_dynamic`` of it: int8 weights, activations quantised per
call (one scale per tensor) inside the graph; the MLP down-projections stay fp32 (their inputs
carry the "massive activations" that one scale per tensor flattens, encoders.quantize), weights
get one scale per output channel, and the q/k/v and gate/up inputs are smoothed before export
(SmoothQuant, encoders.smoothing: scales folded into the norms and weights, the fp32 function
unchanged), so the fp32 and the int8 file come from one export.

Everything around the backbone is unchanged: prompts, batching, pooling run as for torch, and
the LM-head projection onto the vocabulary (aligned tokens, “A Text is Worth Several Tokens”
§2, eq.15-16) reads the fp32 head in torch.

The runtime an encoder runs on (:func:`apply_runtime`): ``"auto"`` (the default) takes ONNX
Runtime fp32 wherever it applies — a prompt-family embedder at fp32 on the CPU, the packages
installed, a backbone under the single-file ONNX limit — and torch elsewhere. Its vectors equal
torch's within float rounding, and its matrix products are faster where ONNX Runtime's kernels
use the CPU's full vector width (on the 2-core AMD machine of benchmarks/results/onnx_runtime.json:
2.2x torch's documents/s and half its query time). An export that fails leaves a note in its
cache folder, so ``auto`` falls back to torch at once the next time.
"""
from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import importlib.util
import io
import json
import logging
import os
import shutil
import tempfile
import warnings
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Callable, Iterator

import numpy as np
import torch

from alignir.encoders.runtimes import RUNTIME_ENV, RUNTIMES, check_runtime
from alignir.encoders.smoothing import ALPHA, CALIBRATION_TEXTS, input_maxima, smooth
from alignir.errors import InvalidInputError
from alignir.io import file_lock

__all__ = ["RUNTIMES", "RUNTIME_ENV", "EXPORT_FORMAT", "check_runtime", "onnx_unavailable", "model_key",
           "backbone_files", "OnnxBackbone", "to_onnx", "apply_runtime", "runtime_of"]

log = logging.getLogger(__name__)

#: the packages the ONNX runtime needs: the runtime, the model format, the exporter's op library
ONNX_PACKAGES = ("onnxruntime", "onnx", "onnxscript")
#: a backbone whose fp32 weights exceed this is not exported by ``auto``: one .onnx file holds
#: at most 2 GiB (protobuf's limit), and a model that large pays its export's minutes and disk
MAX_EXPORT_BYTES = 2**31 - 2**27
#: the note an export that failed leaves in its cache folder
FAILED_NOTE = "export-failed.json"
#: what the exported file is; part of the cache key (change it whenever the export changes)
EXPORT_FORMAT = 2
#: MatMuls whose weight name contains one of these stay fp32 in the int8 file
FP32_WEIGHTS = ("down_proj", "fc2")
INPUTS = ("input_ids", "attention_mask", "position_ids")
#: the smoothing folded into the exported weights (encoders.smoothing; fp32 function unchanged)
SMOOTHING = f"smoothquant-a{ALPHA}:qkv,gate-up"


def onnx_unavailable(embedder: Any) -> str | None:
    """Why ``embedder`` cannot run on ONNX Runtime here (None when it can): its family (the
    backbone must be a transformer run once per batch: the prompt families), its device or
    dtype (an fp32 model on the CPU), its precision (int8 is torch's), the packages, the size."""
    from alignir.encoders.quantize import precision_of

    if not isinstance(getattr(embedder, "_backbone", None), torch.nn.Module) or not hasattr(embedder, "collate"):
        return f"the embedder family {getattr(embedder, 'family', type(embedder).__name__)!r} is not supported"
    if getattr(embedder, "bidirectional", False):
        return "the embedder attends bidirectionally (the exported graph keeps the model's causal mask)"
    loaded = embedder.loaded
    if loaded.device.type != "cpu":
        return f"the model is on {loaded.device.type}, not the CPU"
    if loaded.dtype != torch.float32:
        return f"the model is {str(loaded.dtype).replace('torch.', '')}, not float32"
    if precision_of(loaded) != "fp32":
        return f"precision {precision_of(loaded)} runs on torch (leave precision at fp32)"
    missing = [p for p in ONNX_PACKAGES if importlib.util.find_spec(p) is None]
    if missing:
        return f"{', '.join(missing)} not installed (pip install {' '.join(ONNX_PACKAGES)})"
    size = sum(p.numel() * p.element_size() for p in embedder._backbone.parameters())
    if size > MAX_EXPORT_BYTES:
        return f"the backbone's {size / 2**30:.1f} GiB of weights exceed one ONNX file's 2 GiB"
    return None

def model_key(embedder: Any) -> str:
    """The cache key of an embedder's exported backbone: the parts of its fingerprint that make
    the backbone (model identity with its file hashes, dtype, adapter sha256; not the template
    or lengths, which the graph does not hold), the export format and the exporting torch. A
    model whose weights' sha256 identifies it is keyed without its folder's name and place, so
    a moved or renamed copy of the same weights reuses the export (as an index accepts it)."""
    fp = embedder.fingerprint()
    model = fp.get("model")
    if isinstance(model, dict) and model.get("sha256"):
        model = {k: v for k, v in model.items() if k not in ("source", "name")}
    blob = json.dumps({"model": model, "dtype": fp.get("dtype"), "adapter": fp.get("adapter_sha256"),
                       "format": EXPORT_FORMAT, "smoothing": SMOOTHING, "torch": torch.__version__},
                      sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:32]


class _Forward(torch.nn.Module):
    """The backbone with the three inputs as positional arguments and the last hidden state out."""

    def __init__(self, backbone: torch.nn.Module) -> None:
        super().__init__()
        self.backbone = backbone

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, position_ids: torch.Tensor) -> torch.Tensor:
        out = self.backbone(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                            use_cache=False)
        return out.last_hidden_state if hasattr(out, "last_hidden_state") else out[0]


def _example(embedder: Any) -> tuple[torch.Tensor, ...]:
    """Two prompts of different lengths, so neither dimension is specialised to 1."""
    ids, pos, _, _ = embedder.prepare(["An example document.", "A second, longer example document to encode."],
                                      "document")
    return embedder.collate(ids, pos)[:3]


@contextlib.contextmanager
def _quiet(*loggers: str) -> Iterator[None]:
    """The named loggers pass only errors inside the block."""
    found = [logging.getLogger(name) for name in loggers]
    levels = [lg.level for lg in found]
    for lg in found:
        lg.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for lg, level in zip(found, levels):
            lg.setLevel(level)


def _export(embedder: Any, backbone: torch.nn.Module, path: Path) -> None:
    batch, length = torch.export.Dim("batch"), torch.export.Dim("length")
    dims = {name: {0: batch, 1: length} for name in INPUTS}
    # the exporter reports its passes on stdout and warns about the axis names: not the user's business
    with torch.inference_mode(False), torch.no_grad(), warnings.catch_warnings(), \
            contextlib.redirect_stdout(io.StringIO()), _quiet("torch.onnx", "torch.export", "onnxscript"):
        warnings.simplefilter("ignore")
        torch.onnx.export(_Forward(backbone).eval(), _example(embedder), str(path), input_names=list(INPUTS),
                          output_names=["last_hidden_state"], dynamic_shapes=dims, dynamo=True,
                          external_data=False, verbose=False)


def _module_of(node: Any) -> str:
    """The torch module a node of the exported graph comes from (the exporter's name scopes)."""
    for prop in node.metadata_props:
        if prop.key == "pkg.torch.onnx.name_scopes":
            scopes = [x.strip(" '") for x in prop.value.strip("[]").split(",")]
            return scopes[-2] if len(scopes) > 1 else ""
    return ""


def _quantize(src: Path, dst: Path) -> None:
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    graph = onnx.load(str(src), load_external_data=False).graph
    keep = [n.name for n in graph.node if n.op_type in ("MatMul", "Gemm") and _module_of(n).endswith(FP32_WEIGHTS)]
    quantize_dynamic(str(src), str(dst), weight_type=QuantType.QInt8, per_channel=True, nodes_to_exclude=keep)


def _atomic(folder: Path, name: str, write) -> Path:
    """``folder/name`` written by ``write(tmp_path)`` to a temporary file, then renamed."""
    target = folder / name
    tmp = Path(tempfile.mkdtemp(dir=folder, prefix=f".{name}."))
    try:
        write(tmp / name)
        os.replace(tmp / name, target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def backbone_files(embedder: Any, backbone: torch.nn.Module | Callable[[], torch.nn.Module], quantize: bool = True,
                   root: str | Path | None = None,
                   on_export: Callable[[str], None] | None = None) -> tuple[Path, bool]:
    """(the ONNX file of ``embedder``'s ``backbone``, int8 when ``quantize``; whether it was made
    now). Exported (and quantised) once per encoder fingerprint under ``root`` (default
    ``cache_dir()/onnx``); later calls reuse the file. ``backbone`` may be a function that makes
    the module, called only when the file has to be exported; ``on_export`` hears (as the log
    does) that an export starts."""
    folder = _folder(embedder, root)
    name = "backbone-int8.onnx" if quantize else "backbone.onnx"
    with file_lock(folder / ".lock"):
        if (folder / name).is_file():
            return folder / name, False
        fp32 = folder / "backbone.onnx"
        if not fp32.is_file():
            module = backbone() if callable(backbone) and not isinstance(backbone, torch.nn.Module) else backbone
            said = f"exporting the model to ONNX once, about a minute per 100M parameters (kept in {folder})"
            (on_export or log.info)(said)
            try:
                _atomic(folder, fp32.name, lambda p: _export(embedder, module, p))
            except Exception as exc:
                (folder / FAILED_NOTE).write_text(json.dumps({"error": f"{type(exc).__name__}: {exc}"[:2000],
                                                              "torch": torch.__version__}, indent=1))
                raise
            (folder / "fingerprint.json").write_text(json.dumps(embedder.fingerprint(), indent=1, default=str))
        if quantize:
            _atomic(folder, name, lambda p: _quantize(fp32, p))
        return folder / name, True


def _folder(embedder: Any, root: str | Path | None) -> Path:
    from alignir.encoders.models import cache_dir

    return (Path(root).expanduser() if root is not None else cache_dir() / "onnx") / model_key(embedder)


class OnnxBackbone:
    """An ONNX Runtime session called like the torch backbone (``input_ids``, ``attention_mask``,
    ``position_ids`` keywords; an object with ``last_hidden_state`` back). ``threads``: the
    session's intra-op threads (default torch's count); ``spinning``: whether an idle thread
    spins for work before it sleeps (off by default: on a shared CPU, or beside torch's own
    threads, a spinning pool takes the cores the other work needs;
    benchmarks/archive/omp_wait_policy.py measures both)."""

    def __init__(self, path: str | Path, threads: int | None = None, spinning: bool = False) -> None:
        import onnxruntime as ort

        opts = ort.SessionOptions()
        opts.intra_op_num_threads = int(threads or torch.get_num_threads())
        opts.inter_op_num_threads = 1
        opts.add_session_config_entry("session.intra_op.allow_spinning", "1" if spinning else "0")
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        self.path = Path(path)
        self.session = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])

    def __call__(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, position_ids: torch.Tensor,
                 **_: Any) -> SimpleNamespace:
        feed = {"input_ids": input_ids, "attention_mask": attention_mask, "position_ids": position_ids}
        out = self.session.run(None, {k: np.ascontiguousarray(v.cpu().numpy(), dtype=np.int64)
                                      for k, v in feed.items()})[0]
        return SimpleNamespace(last_hidden_state=torch.from_numpy(out))


def _smoothed(embedder: Any) -> torch.nn.Module:
    """A structure copy of the embedder's fp32 backbone with the SmoothQuant scales folded in
    (calibrated on the fixed texts through the whole prompt, as the graph will run them)."""
    from alignir.encoders.quantize import _structure_copy

    fp32 = embedder._backbone
    layers = list(getattr(fp32, "layers", []))
    maxima = input_maxima(layers, lambda: (embedder.encode_documents(list(CALIBRATION_TEXTS), progress=False),
                                          embedder.encode_queries(list(CALIBRATION_TEXTS), progress=False)))
    copy = _structure_copy(fp32)
    smooth(list(getattr(copy, "layers", [])), maxima)
    return copy


def to_onnx(embedder: Any, quantize: bool = True, root: str | Path | None = None,
            on_export: Callable[[str], None] | None = None) -> Any:
    """Make a prompt-family ``embedder`` (fp32, on the CPU) run its backbone in ONNX Runtime, in
    place, and return it; int8 (dynamic) when ``quantize``. At fp32 the vectors equal torch's
    within float rounding (as the prefix cache's do), so the fingerprint is unchanged and fp32
    indexes and embedding caches are shared; int8 joins the model identity (runtime, precision,
    scheme), so it is in every fingerprint (and cache key) made afterwards."""
    from alignir.encoders.models import backbone as backbone_of
    from alignir.encoders.quantize import _merged

    why = onnx_unavailable(embedder)
    if why is not None:
        raise InvalidInputError(f"runtime onnx: {why}")
    loaded = embedder.loaded
    peft = getattr(embedder, "_peft", None)
    if peft is not None:  # load_adapter made a private copy: merge the LoRA weights into it
        embedder._peft = _merged(peft)
        embedder._backbone = backbone_of(embedder._peft)
    embedder.prefix_cache = False  # the exported graph takes no KV cache
    path, _ = backbone_files(embedder, lambda: _smoothed(embedder), quantize=quantize, root=root, on_export=on_export)
    embedder._backbone = OnnxBackbone(path)
    if quantize:
        scheme = "onnxruntime-dynamic-per-tensor;per-channel-weights;" + SMOOTHING + ";fp32:" + ",".join(FP32_WEIGHTS)
        identity = {**loaded.identity, "runtime": "onnx", "precision": "int8", "int8_scheme": scheme}
        embedder.loaded = dataclasses.replace(loaded, identity=identity)
    return embedder


def runtime_of(embedder: Any) -> str:
    """"onnx" when ``embedder``'s backbone runs on ONNX Runtime, else "torch"."""
    return "onnx" if isinstance(getattr(embedder, "_backbone", None), OnnxBackbone) else "torch"


def apply_runtime(embedder: Any, runtime: str | None = None, root: str | Path | None = None,
                  on_export: Callable[[str], None] | None = None) -> Any:
    """Put ``embedder`` on its runtime (:func:`check_runtime`: the argument, ``$ALIGNIR_RUNTIME``,
    else "auto") and return it. "torch": unchanged. "onnx": :func:`to_onnx` at fp32, or an
    InvalidInputError saying why it cannot (:func:`onnx_unavailable`). "auto": ONNX where it
    applies, torch otherwise; an export that fails is logged once as a warning, noted in the
    cache (:data:`FAILED_NOTE`: later calls skip the attempt) and leaves the embedder on torch.
    The fingerprint does not change (fp32 vectors equal within float rounding). ``on_export``
    hears that an export starts (a progress line: it takes about a minute for SmolLM2-135M)."""
    chosen = check_runtime(runtime)
    if chosen == "torch" or runtime_of(embedder) == "onnx":
        return embedder
    why = onnx_unavailable(embedder)
    if why is not None:
        if chosen == "onnx":
            raise InvalidInputError(f"runtime onnx: {why}")
        return embedder
    if chosen == "auto" and (_folder(embedder, root) / FAILED_NOTE).is_file():
        return embedder
    prefix_cache = embedder.prefix_cache
    try:
        return to_onnx(embedder, quantize=False, root=root, on_export=on_export)
    except Exception as exc:  # the backbone is still torch's (an adapter merged: the same function)
        embedder.prefix_cache = prefix_cache
        if chosen == "onnx":
            raise
        log.warning("the ONNX export failed (%s: %s); the encoder runs on torch (note in %s)",
                    type(exc).__name__, str(exc)[:200], _folder(embedder, root))
        return embedder
