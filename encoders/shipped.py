"""Trained embedders that ship inside the package: a registered name that stands for a base
model, an embedder family and a LoRA adapter stored in ``encoders/adapters/NAME/``.

``alignir build-index --model smollm2-135m-alignir`` (or ``alignir beir``, or
``build_index(model="smollm2-135m-alignir")``) indexes with the trained embedder, no training
step needed; the index records the base model, the family and the adapter as ``builtin:NAME``,
and its encoder fingerprint holds the adapter's sha256, so a searcher refuses any other encoder.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from alignir.errors import InvalidInputError

__all__ = ["ShippedEmbedder", "SHIPPED", "BUILTIN_PREFIX", "adapter_dir", "resolve_adapter", "resolve_shipped",
           "hybrid_fusion", "leg_set_fusion", "shipped_name"]

BUILTIN_PREFIX = "builtin:"
ADAPTERS = Path(__file__).resolve().parent / "adapters"


@dataclass(frozen=True)
class ShippedEmbedder:
    name: str
    base_model: str  # a registered model name (encoders.models.REGISTERED_MODELS)
    family: str  # the embedder family that reads through the adapter
    description: str
    #: the "hybrid" mode's fusion (method, α on dense) an index built with this model gets by
    #: default (IndexConfig.fusion); None: FusionConfig's own default
    hybrid: tuple[str, float] | None = None
    #: the "calibrated" defaults of the leg sets with BM25 an index built with this model gets
    #: (FusionConfig.leg_sets: {"dense+sparse+bm25": {"weights": {...}, "gate_power": p}});
    #: empty: alignir's own (retrieval.fusion_plan.LEG_SET_WEIGHTS, chosen for untrained legs).
    #: Both are saved in the index at build; a search's plan names them "model default"
    leg_sets: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)


#: v3's three-leg defaults (see its entry), which v4 keeps
V3_LEG_SETS: Mapping[str, Mapping[str, Any]] = {
    "dense+sparse+bm25": {"weights": {"dense": 0.25, "sparse": 0.25, "bm25": 0.5}, "gate_power": 2.0}}

SHIPPED: dict[str, ShippedEmbedder] = {
    "smollm2-135m-alignir": ShippedEmbedder(
        name="smollm2-135m-alignir", base_model="smollm2-135m", family="infonce",
        description="SmolLM2-135M-Instruct, PromptEOL read through a LoRA adapter (r 16, fp16, 9.8 MB) trained "
                    "with InfoNCE on SciFact train pairs + BM25 hard negatives (360 steps of batch 8)",
        # its dense leg is the stronger one: z-score, α 0.7, chosen leave-one-collection-out over
        # ADI/CISI/Cranfield/MED/SciFact (benchmarks/defaults/hybrid_alpha.py; +0.000..+0.017 nDCG@10
        # over minmax 0.5, benchmarks/results/fusion_transfer.json "hybrid-alpha" rows)
        hybrid=("zscore", 0.7)),
    # v2: a new name rather than new weights under the old one, so that indexes built with the
    # first adapter (its sha256 is in their encoder fingerprint) keep opening
    "smollm2-135m-alignir-v2": ShippedEmbedder(
        name="smollm2-135m-alignir-v2", base_model="smollm2-135m", family="infonce",
        description="SmolLM2-135M-Instruct, PromptEOL read through a LoRA adapter (r 16, fp16, 9.4 MiB) trained "
                    "with InfoNCE on SciFact train pairs + BM25 hard negatives plus KL distillation from "
                    "all-MiniLM-L6-v2's in-batch scores (360 steps of batch 8)",
        # the fusion of v1 (not re-chosen for v2)
        hybrid=("zscore", 0.7)),
    # v3: v2 trained 640 steps more (1,000 in all) on SciFact train pairs plus title and crop pairs
    # of the SciFact corpus, same teacher; its init_adapter is builtin:smollm2-135m-alignir-v2
    "smollm2-135m-alignir-v3": ShippedEmbedder(
        name="smollm2-135m-alignir-v3", base_model="smollm2-135m", family="infonce",
        description="SmolLM2-135M-Instruct, PromptEOL read through a LoRA adapter (r 16, fp16, 9.4 MiB): v2 "
                    "trained 640 steps more on SciFact train pairs plus title/abstract and crop pairs of the "
                    "SciFact corpus, with all-MiniLM-L6-v2 distillation (1,000 steps of batch 8 in all)",
        # z-score α 0.7: re-chosen for v3 leave-one-collection-out, the same as v1's
        # (benchmarks/defaults/hybrid_alpha.py, fusion_transfer.json "hybrid-alpha" rows of this model)
        hybrid=("zscore", 0.7),
        # three legs: BM25 at 0.5 instead of 0.6, gate power 2: chosen leave-one-collection-out
        # under the "no-regress" rule (benchmarks/defaults/leg_set_weights.py; held out +0.001..+0.019
        # nDCG@10 on ADI/CISI/Cranfield/MED/SciFact); the two-leg sets keep the searcher's defaults
        leg_sets=V3_LEG_SETS),
    # v4: v3 trained 85 steps more on a GPU (batch 32, 128 tokens) on SciFact train pairs plus
    # 5,000 title/abstract and 5,000 crop pairs of the SciFact corpus, same teacher; run
    # gpu-distill-85 of benchmarks/results/gpu_train.json. v3's fusion: it was scored with it
    "smollm2-135m-alignir-v4": ShippedEmbedder(
        name="smollm2-135m-alignir-v4", base_model="smollm2-135m", family="infonce",
        description="SmolLM2-135M-Instruct, PromptEOL read through a LoRA adapter (r 16, fp16, 9.4 MiB): v3 "
                    "trained 85 steps more (batch 32, 128 tokens) on SciFact train pairs plus 10,000 "
                    "title/abstract and crop pairs of the SciFact corpus, with all-MiniLM-L6-v2 distillation",
        hybrid=("zscore", 0.7), leg_sets=V3_LEG_SETS),
    # Gemma 3 270M trained 3,000 steps from its base (1,500 on SciFact's train pairs plus title and
    # crop pairs of its corpus and six package corpora with BM25 negatives, 1,500 more on negatives it mined
    # itself), EmbeddingGemma-300M distillation; run long-base-gemma3-270m-1500-mined-1500 of
    # benchmarks/results/gpu_train.json, scored there with v3's fusion, which it keeps. Not the
    # default: the ship rule over v4 fails on ADI (three legs 0.034 below) and Cranfield (0.003)
    "gemma3-270m-alignir": ShippedEmbedder(
        name="gemma3-270m-alignir", base_model="gemma3-270m", family="infonce",
        description="Gemma 3 270M, PromptEOL read through a LoRA adapter (r 16, fp16, 7.3 MiB) trained 3,000 "
                    "steps from the base model on SciFact train pairs plus title/body and crop pairs of its corpus "
                    "and six package corpora, hard negatives mined half-way, EmbeddingGemma-300M distillation; the "
                    "strongest dense leg shipped, at about SmolLM2's indexing speed on CPU and slower queries "
                    "(Gemma Terms of Use)",
        hybrid=("zscore", 0.7), leg_sets=V3_LEG_SETS),
}

#: the model of build-index / beir / encode when none is given: the best shipped trained embedder.
#: v4 passes the ship rule over v3 (benchmarks/decisions/ship_rule.py: three legs above v3 on SciFact,
#: CISI, Cranfield and ADI, 0.002 below on MED) and is above it on dense and aligned-token
#: nDCG@10 of SciFact, MED, CISI and Cranfield (benchmarks/results/gpu_train.json, gpu-distill-85).
DEFAULT_MODEL = "smollm2-135m-alignir-v4"


def adapter_dir(name: str) -> Path:
    """The folder of a shipped adapter."""
    if name not in SHIPPED:
        raise InvalidInputError(f"no shipped adapter {name!r}; shipped: {', '.join(sorted(SHIPPED))}")
    return ADAPTERS / name


def resolve_adapter(path: str | Path) -> Path:
    """An adapter location as a folder: ``builtin:NAME`` is a shipped adapter, anything else a path."""
    s = str(path)
    return adapter_dir(s[len(BUILTIN_PREFIX):]) if s.startswith(BUILTIN_PREFIX) else Path(s).expanduser()


def resolve_shipped(model: str, embedder: str, options: dict[str, Any] | None,
                    default_embedder: str = "prompteol") -> tuple[str, str, dict[str, Any]]:
    """(model spec to load, embedder family, embedder options) for ``model``; a shipped name
    becomes its base model, family and ``adapter=builtin:NAME``. Other models pass unchanged.
    Every new encoder reads runs of capitals in sentence case unless told otherwise
    (``text_form``, default :data:`encoders.text_form.DEFAULT_TEXT_FORM`)."""
    from alignir.encoders.text_form import DEFAULT_TEXT_FORM, check_text_form

    opts = dict(options or {})
    opts["text_form"] = check_text_form(opts.get("text_form") or DEFAULT_TEXT_FORM)
    shipped = SHIPPED.get(model) if isinstance(model, str) else None
    if shipped is None:
        return _resolve_pretrained(model, embedder, opts, default_embedder)
    if embedder not in (default_embedder, shipped.family):
        raise InvalidInputError(f"model {model!r} is a trained {shipped.family!r} embedder; "
                                f"leave --embedder unset (got {embedder!r})")
    if opts.get("adapter") not in (None, BUILTIN_PREFIX + shipped.name):
        raise InvalidInputError(f"model {model!r} brings its own adapter; leave --adapter unset")
    opts["adapter"] = BUILTIN_PREFIX + shipped.name
    return shipped.base_model, shipped.family, opts


def _resolve_pretrained(model: str, embedder: str, opts: dict[str, Any],
                        default_embedder: str) -> tuple[str, str, dict[str, Any]]:
    """A public LLM embedder (encoders.pretrained): its registered name reads through the
    ``pretrained`` family with its profile; an ``lm_head_from`` option moves into the model spec
    (``SPEC?lm_head_from=BASE``), which the index records and its searcher loads."""
    from alignir.encoders.pretrained import parse_spec, profile_of, with_lm_head

    if not isinstance(model, str):
        return model, embedder, opts
    head = opts.pop("lm_head_from", None)
    model = with_lm_head(model, head)
    profile = profile_of(parse_spec(model)[0])
    if profile is not None:
        if embedder not in (default_embedder, "pretrained"):
            raise InvalidInputError(f"model {model!r} is the public embedder {profile.name!r}, read by the "
                                    f"'pretrained' family; leave --embedder unset (got {embedder!r})")
        embedder = "pretrained"
        opts.setdefault("profile", profile.name)
    return model, embedder, opts


def hybrid_fusion(model: str) -> tuple[str, float] | None:
    """The (method, α) of the "hybrid" mode that ``model`` ships with, or None (a model that is
    not shipped, or one without a recommendation)."""
    shipped = SHIPPED.get(model) if isinstance(model, str) else None
    return None if shipped is None else shipped.hybrid


def leg_set_fusion(model: str) -> dict[str, dict[str, Any]]:
    """The calibrated leg-set defaults (FusionConfig.leg_sets) ``model`` ships with; empty for a
    model that is not shipped or brings none."""
    shipped = SHIPPED.get(model) if isinstance(model, str) else None
    return {} if shipped is None else {k: {"weights": dict(v["weights"]), "gate_power": v["gate_power"]}
                                       for k, v in shipped.leg_sets.items()}


def shipped_name(adapter: Any) -> str | None:
    """The shipped model an index's ``adapter`` option names (``builtin:NAME``, as
    :func:`resolve_shipped` records it), or None."""
    if not isinstance(adapter, str) or not adapter.startswith(BUILTIN_PREFIX):
        return None
    name = adapter[len(BUILTIN_PREFIX):]
    return name if name in SHIPPED else None
