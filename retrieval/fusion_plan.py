"""The fusion plan of a search: which legs it fuses, by which rule, with which weights, and why.

Every search resolves its options once, with :func:`resolve_plan`, into a frozen
:class:`FusionPlan`, then executes it (:meth:`FusionPlan.fuse`) over its legs' lists, whichever
backend searched them (the index folder or Milvus). The plan records where each choice came
from (:class:`Choice`: a source from :data:`SOURCES` and a reason), which ``alignir search
--explain`` prints and ``alignir eval`` stores.

Precedence (the first that applies wins):

- rule: the call's ``fusion``; else "calibrated" for a leg set with BM25 given neither ``alpha``
  nor ``weights`` (:data:`LEG_SET_FUSION`); else the searcher's ``FusionConfig.method`` (the
  index's saved fusion, which a shipped model fills at build, or the one the searcher was
  opened with). "calibrated" on an index without a stored calibration runs "agree", the same
  gate measured per query (the fallback). "agree" and "calibrated" need the bm25 leg.
- weights of a '+'-joined leg set: the call's ``weights``; else the call's ``alpha`` (dense α,
  the other legs share 1-α; equal when the set has no dense leg); else, under "calibrated", the
  index's own entry for the set (``FusionConfig.leg_sets``, with its gate power); else, for a
  leg set with BM25 given neither, the rule's :data:`LEG_SET_WEIGHTS`; else equal. "hybrid"
  weighs dense by α (the call's, else the config's) and ignores ``weights``.
- gate: "calibrated" multiplies each LLM leg's weight by the gate (:data:`LEG_SET_CALIBRATED`)
  of its stored agreement with BM25 (retrieval/calibration.py); "agree" gates every query by
  its own agreement (:data:`LEG_SET_AGREE`, fusion.agree).
- guard: "calibrated" also fades, on each query, an LLM leg whose agreement with BM25 on that
  query falls below a share of its stored agreement (:data:`CALIBRATED_GUARD`,
  retrieval/fusion_guard.py): queries unlike the pseudo-queries the index was calibrated on.
- depth (each leg's list length before fusion): the call's, else the config's.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Mapping, Sequence

import numpy as np

from alignir.errors import InvalidInputError
from alignir.retrieval import fusion as fusion_mod
from alignir.retrieval.calibration import FusionCalibration
from alignir.retrieval.config import FusionConfig
from alignir.retrieval.fusion_guard import CALIBRATED_GUARD, FusionGuard
from alignir.retrieval.legs import LEGS

if TYPE_CHECKING:
    from alignir.encoders.shipped import ShippedEmbedder

__all__ = ["FusionPlan", "Choice", "resolve_plan", "fuse_legs", "calibrated_weights", "calibrated_gate",
           "SOURCES", "LEG_SET_WEIGHTS", "LEG_SET_AGREE", "LEG_SET_CALIBRATED", "CALIBRATED_GATE",
           "LEG_SET_FUSION", "LEG_SET_DEFAULTS", "CALIBRATED_GUARD"]

#: Base weights of the leg sets with the BM25 leg per fusion method, used when a call gives no
#: ``weights`` or ``alpha``. "zscore": the fixed weights chosen leave-one-collection-out on ADI,
#: MED, Cranfield and CISI (benchmarks/archive/fusion_transfer.py; BM25 at 0.6; the default before the
#: calibrated fusion). "calibrated" (the default, below) gates them once per collection; "agree" (the default
#: of an index without a calibration): the same z-score fusion with every LLM leg's weight gated per
#: query by its chance-corrected top-k agreement with the BM25 leg (fusion.agree), so a leg
#: that is noise for a query (a truncated long document, a model unfit for the domain) drops
#: out and the fused order falls back to BM25's; weights and gate chosen on dumped leg lists,
#: with the LLM legs also deliberately degraded (benchmarks/defaults/fusion_rules.py: safe within 0.005
#: of BM25 everywhere, then the best worst gain retention; the dense+sparse+bm25 weights are
#: the z-score ones, so legs that agree get exactly the fixed z-score fusion).
LEG_SET_WEIGHTS: dict[str, dict[tuple[str, ...], dict[str, float]]] = {
    "zscore": {
        ("dense", "bm25"): {"dense": 0.4, "bm25": 0.6},
        ("sparse", "bm25"): {"sparse": 0.4, "bm25": 0.6},
        ("dense", "sparse", "bm25"): {"dense": 0.2, "sparse": 0.2, "bm25": 0.6},
    },
    "agree": {
        ("dense", "bm25"): {"dense": 0.4, "bm25": 0.6},
        ("sparse", "bm25"): {"sparse": 0.8, "bm25": 0.6},
        ("dense", "sparse", "bm25"): {"dense": 0.2, "sparse": 0.2, "bm25": 0.6},
    },
}
#: The agreement gate of each leg set under "agree" (fusion.AgreeParams), chosen per leg set
#: with the weights above (benchmarks/defaults/fusion_rules.py). dense+sparse+bm25 and dense+bm25: each
#: LLM leg's top 10 against BM25's top 50 and back, corrected for chance with the collection
#: size, full weight at half of the way from chance to full agreement (AgreeParams()).
#: fusion.AGREE_TOP10 with weights 0.3/0.3/0.6 is the gate before (plain top-10 overlap).
LEG_SET_AGREE: dict[tuple[str, ...], fusion_mod.AgreeParams] = {
    ("dense", "bm25"): fusion_mod.AgreeParams(),
    ("sparse", "bm25"): fusion_mod.AgreeParams(k=20, depth=None, symmetric=False, tau=0.7, power=1.0),
    ("dense", "sparse", "bm25"): fusion_mod.AgreeParams(),
}
LEG_SET_WEIGHTS["calibrated"] = LEG_SET_WEIGHTS["zscore"]
#: The gate of each leg set under "calibrated" (retrieval/calibration.py): every LLM leg's
#: z-score weight times gate(ā), ā its mean chance-corrected agreement with BM25 on the
#: index's pseudo-queries, for every query; chosen leave-one-collection-out with the LLM legs
#: also degraded (benchmarks/defaults/fusion_rules.py, rule "calibrated").
#: dense+sparse+bm25: full weight from agreement 0.2 down linearly to 0 (pseudo-query
#: agreement on the shipped collections 0.22-0.31 with the shipped model, 0.08-0.13 with the
#: documents cut to 16 tokens, ~0.02 for shuffled legs). CALIBRATED_GATE: other leg sets.
CALIBRATED_GATE = fusion_mod.AgreeParams(tau=0.2)
LEG_SET_CALIBRATED: dict[tuple[str, ...], fusion_mod.AgreeParams] = {
    ("dense", "bm25"): fusion_mod.AgreeParams(tau=0.2, power=2.0),
    ("sparse", "bm25"): fusion_mod.AgreeParams(tau=0.4, power=2.0),
    ("dense", "sparse", "bm25"): CALIBRATED_GATE,
}
#: The fusion of a leg set with BM25 when a call gives none of fusion, alpha, weights
#: ("calibrated"; on an index without a stored calibration it is "agree", per query).
LEG_SET_FUSION = "calibrated"
LEG_SET_DEFAULTS: dict[tuple[str, ...], tuple[str, dict[str, float]]] = {
    legs: (LEG_SET_FUSION, w) for legs, w in LEG_SET_WEIGHTS[LEG_SET_FUSION].items()}

#: Where a choice of a plan came from: the call ("user": its fusion / alpha / weights / depth, or
#: the FusionConfig a searcher was opened with), the index's saved fusion ("index config"), the
#: index's own entry for a leg set ("index leg-set default", FusionConfig.leg_sets), what the
#: index's shipped model brings ("model default", encoders.shipped, saved in the index at
#: build), the tables above ("alignir default"), the index's stored calibration ("calibration"),
#: the per-query gate standing in for a missing calibration ("fallback"), the mode itself ("mode").
USER, INDEX, INDEX_LEG_SET, MODEL, DEFAULT, CALIBRATION, FALLBACK, MODE = (
    "user", "index config", "index leg-set default", "model default", "alignir default", "calibration",
    "fallback", "mode")
SOURCES = (USER, INDEX, INDEX_LEG_SET, MODEL, DEFAULT, CALIBRATION, FALLBACK, MODE)
#: what each rule computes, for the plan's one-line summary
RULES = {"none": "one leg: its own ranking", "minmax": "min-max normalised scores, weighted sum",
         "zscore": "z-scored scores, weighted sum", "rrf": "reciprocal rank fusion",
         "agree": "z-score with each LLM leg gated per query by its agreement with bm25",
         "calibrated": "z-score with each LLM leg gated by its stored agreement with bm25, "
                       "guarded per query"}


@dataclass(frozen=True)
class Choice:
    """Where one choice of a plan came from: ``source`` (one of :data:`SOURCES`) and why."""

    source: str
    reason: str

    def __post_init__(self) -> None:
        if self.source not in SOURCES:
            raise InvalidInputError(f"plan source must be one of {SOURCES}, got {self.source!r}")


@dataclass(frozen=True)
class FusionPlan:
    """How one search fuses its legs (see the module docstring for the precedence).

    ``legs``: in mode order. ``rule``: the rule that runs ("none" for one leg, "minmax",
    "zscore", "rrf", "agree", "calibrated"); ``requested``: the one asked for (differs when the
    fallback replaced it; ``fallback`` says why). ``weights``: each leg's weight in the convex
    rules, after the calibration's gate (``base_weights`` before it); ``rrf_weights``: RRF's
    (None: plain RRF). ``alpha``: the α on the dense leg when it set the weights. ``gate``: the
    agreement gate of "calibrated" / "agree". ``calibration``: the stored calibration the gate
    read ("calibrated" only). ``guard``: the per-query guard of "calibrated"
    (retrieval/fusion_guard.py; ``weights`` are before it, :meth:`query_weights` after it).
    ``depth``: each leg's list length before fusion; ``rrf_k``: RRF's
    k. ``sources``: {choice: :class:`Choice`} for "rule", "weights" (or "alpha"), "gate",
    "calibration", "guard", "depth"."""

    mode: str
    legs: tuple[str, ...]
    rule: str
    requested: str
    weights: Mapping[str, float]
    base_weights: Mapping[str, float]
    rrf_weights: Mapping[str, float] | None = None
    alpha: float | None = None
    gate: fusion_mod.AgreeParams | None = None
    calibration: FusionCalibration | None = None
    fallback: str | None = None
    depth: int = 100
    rrf_k: int = 60
    sources: Mapping[str, Choice] = field(default_factory=dict)
    guard: FusionGuard | None = None

    def fuse(self, lists: Sequence[Mapping[int, float]], n_docs: int | None = None) -> Mapping[int, float]:
        """One query's fused {doc number: score} from its legs' lists (in :attr:`legs` order);
        ``n_docs``: the number of documents the search drew from (the agree gate's chance
        correction). One leg: its own list."""
        if len(self.legs) == 1:
            return lists[0]
        method = "zscore" if self.rule == "calibrated" else self.rule
        rrf_w = None if self.rrf_weights is None else [self.rrf_weights[leg] for leg in self.legs]
        return _fuse(lists, self.query_weights(lists, n_docs), method, self.rrf_k, rrf_w,
                     anchor=self.legs.index("bm25") if "bm25" in self.legs else None,
                     agree_params=self.gate if self.rule == "agree" else None, n_docs=n_docs)

    def query_weights(self, lists: Sequence[Mapping[int, float]], n_docs: int | None = None) -> list[float]:
        """Each leg's weight (in :attr:`legs` order) on the query of ``lists``: :attr:`weights`,
        times the guard's factor under "calibrated" (retrieval/fusion_guard.py)."""
        w = [self.weights[leg] for leg in self.legs]
        if self.rule != "calibrated" or self.guard is None or self.calibration is None:
            return w
        return [x * f for x, f in zip(w, self.guard.factors(self.legs, lists, self.calibration, n_docs))]

    def to_dict(self) -> dict[str, Any]:
        """The plan as JSON-ready data (what ``alignir eval`` stores under ``plan``)."""
        return {"mode": self.mode, "legs": list(self.legs), "rule": self.rule, "requested": self.requested,
                "fallback": self.fallback, "weights": dict(self.weights), "base_weights": dict(self.base_weights),
                "rrf_weights": None if self.rrf_weights is None else dict(self.rrf_weights), "alpha": self.alpha,
                "gate": None if self.gate is None else self.gate.to_dict(),
                "calibration": None if self.calibration is None else self.calibration.to_dict(),
                "guard": None if self.guard is None else self.guard.to_dict(),
                "depth": self.depth, "rrf_k": self.rrf_k,
                "sources": {k: {"source": c.source, "reason": c.reason} for k, c in self.sources.items()}}

    def describe(self) -> str:
        """A readable block: the rule, then each choice with its value, source and reason."""
        head = f"fusion plan for {self.mode}: {self.rule} ({RULES.get(self.rule, self.rule)})"
        rows: list[tuple[str, str]] = []
        for name, choice in self.sources.items():
            rows.append((name, f"{self._value(name)}  [{choice.source}: {choice.reason}]"))
        width = max((len(n) for n, _ in rows), default=0)
        return "\n".join([head, *(f"  {n.ljust(width)}  {text}" for n, text in rows)])

    def _value(self, name: str) -> str:
        if name == "rule":
            return self.requested if self.requested == self.rule else f"{self.requested} -> {self.rule}"
        if name == "alpha":
            return f"{self.alpha:g} on dense"
        if name == "weights":
            shown = self.rrf_weights if self.rule == "rrf" else self.base_weights
            return "equal (plain)" if shown is None else _legs_text(shown)
        if name == "gate" and self.gate is not None:
            return f"tau {self.gate.tau:g}, power {self.gate.power:g}" + (
                "" if self.rule == "calibrated" else f", top {self.gate.k} vs top {self.gate.anchor_depth}")
        if name == "calibration":
            return f"fused with {_legs_text(self.weights)}"
        if name == "guard" and self.guard is not None:
            g = self.guard
            if not g.active:
                return "off"
            who = "the LLM legs in full while their mean" if g.joint else "each LLM leg in full while its"
            return (f"per query: {who} agreement with bm25 is >= {g.ratio:g} x the stored, none at <= {g.floor:g} x"
                    + ("" if g.power == 1 else f", power {g.power:g}"))
        if name == "depth":
            return f"top {self.depth} of each leg" + (f", rrf_k {self.rrf_k}" if self.rule == "rrf" else "")
        return ""


def resolve_plan(mode: str, legs: Sequence[str], *, fusion: str | None = None, alpha: float | None = None,
                 weights: Mapping[str, float] | None = None, depth: int | None = None,
                 config: FusionConfig | None = None, config_source: str = INDEX,
                 calibration: FusionCalibration | None = None, model: ShippedEmbedder | None = None,
                 known: Sequence[str] | None = None) -> FusionPlan:
    """The plan of a search of ``mode`` (its ``legs``, in mode order) with the call's ``fusion``,
    ``alpha``, ``weights`` and ``depth`` (None: not given) over an index whose fusion is
    ``config`` (the index's saved FusionConfig with its leg-set defaults, or the searcher's:
    ``config_source`` "user"), with its stored ``calibration`` (None: not calibrated), built
    with the shipped ``model`` (its defaults, encoders.shipped, only name where the config's
    values came from). ``known``: the leg names ``weights`` may name (default: the built-in ones
    and ``legs``). Raises InvalidInputError for what no search accepts: an unknown fusion,
    alpha outside [0, 1], weights that do not name the mode's legs, "agree" / "calibrated"
    without the bm25 leg."""
    legs = tuple(legs)
    config = FusionConfig() if config is None else config
    known = (*LEGS, *legs) if known is None else tuple(known)
    from_config = _config_choice(config, config_source, model)
    leg_set_default = alpha is None and weights is None and legs in LEG_SET_DEFAULTS
    if fusion is not None:
        requested, rule_choice = fusion, Choice(USER, "fusion given")
    elif leg_set_default:
        requested, rule_choice = LEG_SET_FUSION, Choice(DEFAULT, "the default of a leg set with bm25 when no "
                                                                 "fusion, alpha or weights is given")
    else:
        requested, rule_choice = config.method, from_config
    if requested in ("agree", "calibrated") and len(legs) > 1 and "bm25" not in legs:
        raise InvalidInputError(f"fusion {requested!r} gates the LLM legs by their agreement with the bm25 "
                                f"leg; mode {mode!r} has none (use e.g. dense+sparse+bm25, or another fusion)")
    rule = "agree" if requested == "calibrated" and calibration is None else requested
    # the index's own calibrated defaults of this leg set (a shipped model's, FusionConfig.leg_sets)
    own = config.leg_set(legs) if rule == "calibrated" and alpha is None and weights is None else None
    chosen = weights
    if leg_set_default or own is not None:
        chosen = own[0] if own is not None else LEG_SET_WEIGHTS.get(rule, {}).get(legs)
    a = config.alpha if alpha is None else alpha
    fcfg = FusionConfig(method="zscore" if rule == "calibrated" else rule, alpha=a,
                        depth=depth or config.depth, rrf_k=config.rrf_k)  # validates the rule, alpha, depth
    base, rrf_w = _leg_weights(mode, legs, fcfg.alpha, alpha is not None, chosen, known)
    sources = {"rule": rule_choice}
    if len(legs) == 1:
        return FusionPlan(mode, legs, "none", requested, {legs[0]: 1.0}, {legs[0]: 1.0}, depth=fcfg.depth,
                          rrf_k=fcfg.rrf_k, sources={"rule": Choice(MODE, "one leg: nothing to fuse")})
    if rule == "rrf":  # ranks: α and the convex weights do not apply
        sources["weights"] = Choice(USER, "weights given") if rrf_w is not None else Choice(
            DEFAULT, "plain RRF (alpha weighs the convex rules; weights of a '+'-joined set weigh RRF)")
    elif mode == "hybrid":
        sources["alpha"] = Choice(USER, "alpha given") if alpha is not None else _alpha_choice(from_config)
    else:
        sources["weights"] = _weights_choice(legs, rule, weights, alpha, own, chosen, config, config_source, model)
    gate, fused, used, fallback, guard = None, base, None, None, None
    if rule == "calibrated":
        gate = calibrated_gate(legs, None if own is None else own[1])
        fused, used = calibrated_weights(legs, base, calibration, None if own is None else own[1]), calibration
        sources["gate"] = Choice(DEFAULT, "the calibrated gate of this leg set (LEG_SET_CALIBRATED)") if own is None \
            else Choice(sources["weights"].source, f"LEG_SET_CALIBRATED's gate with the power of the same "
                                                   f"{'+'.join(legs)} entry")
        shown = ", ".join(f"{leg} {a:.3f}" for leg, a in calibration.agreement.items() if leg in legs)
        sources["calibration"] = Choice(CALIBRATION, f"the index's agreement with bm25 on {calibration.queries} "
                                                     f"pseudo-queries: {shown or 'none of these legs'}")
        guard = CALIBRATED_GUARD
        sources["guard"] = Choice(DEFAULT, "a query unlike the pseudo-queries falls back toward bm25 "
                                           "(CALIBRATED_GUARD)")
    elif rule == "agree":
        gate = LEG_SET_AGREE.get(legs) or fusion_mod.AgreeParams()
        sources["gate"] = Choice(DEFAULT, "the per-query agreement gate of this leg set (LEG_SET_AGREE)")
        if requested == "calibrated":
            fallback = "the index has no stored calibration, so each query is gated by its own agreement " \
                       "(alignir calibrate measures it)"
            sources["rule"] = Choice(FALLBACK, f"calibrated ({rule_choice.source}: {rule_choice.reason}) runs as "
                                               f"agree: {fallback}")
    sources["depth"] = Choice(USER, "depth given") if depth else _depth_choice(config_source)
    return FusionPlan(mode, legs, rule, requested, dict(zip(legs, fused)), dict(zip(legs, base)),
                      None if rrf_w is None else dict(zip(legs, rrf_w)),
                      a if rule != "rrf" and _alpha_sets(mode, legs, alpha) else None,
                      gate, used, fallback, fcfg.depth, fcfg.rrf_k, sources, guard)


def _alpha_sets(mode: str, legs: tuple[str, ...], alpha: float | None) -> bool:
    """Whether α set the weights: always in "hybrid", in a leg set when given and it has dense."""
    return mode == "hybrid" or (alpha is not None and "dense" in legs)


def _config_choice(config: FusionConfig, config_source: str, model: ShippedEmbedder | None) -> Choice:
    """The source of the config's method and α: the searcher's own, the shipped model's (saved
    in the index at build) or the index's saved fusion."""
    if config_source == USER:
        return Choice(USER, "the FusionConfig the searcher was opened with")
    if model is not None and model.hybrid == (config.method, config.alpha):
        return Choice(MODEL, f"{model.name} ships {config.method} with alpha {config.alpha:g} (saved in the index)")
    return Choice(INDEX, "the index's saved fusion (IndexConfig.fusion)")


def _alpha_choice(from_config: Choice) -> Choice:
    return from_config if from_config.source != INDEX else Choice(INDEX, "the index's saved alpha (IndexConfig.fusion)")


def _depth_choice(config_source: str) -> Choice:
    if config_source == USER:
        return Choice(USER, "the FusionConfig the searcher was opened with")
    return Choice(INDEX, "the index's saved fusion depth")


def _weights_choice(legs: tuple[str, ...], rule: str, weights: Mapping[str, float] | None, alpha: float | None,
                    own: tuple[dict[str, float], float] | None, chosen: Mapping[str, float] | None,
                    config: FusionConfig, config_source: str, model: ShippedEmbedder | None) -> Choice:
    """Where the base weights of a '+'-joined leg set came from (see :func:`resolve_plan`)."""
    if weights is not None:
        return Choice(USER, "weights given")
    if alpha is not None:
        return (Choice(USER, "alpha given: dense alpha, the other legs share 1-alpha") if "dense" in legs
                else Choice(DEFAULT, "equal: alpha weighs the dense leg, which this set lacks"))
    if own is not None:
        key = "+".join(legs)
        if config_source == USER:
            return Choice(USER, f"the {key} entry of the FusionConfig the searcher was opened with")
        if model is not None and FusionConfig(leg_sets=model.leg_sets).leg_sets.get(key) == config.leg_sets[key]:
            return Choice(MODEL, f"{model.name} ships its own {key} weights and gate power (saved in the index)")
        return Choice(INDEX_LEG_SET, f"the index's own {key} weights and gate power (FusionConfig.leg_sets)")
    if chosen is not None:
        return Choice(DEFAULT, f"the {rule} weights of this leg set (LEG_SET_WEIGHTS)")
    return Choice(DEFAULT, "equal weights")


def _leg_weights(mode: str, legs: Sequence[str], alpha: float, alpha_given: bool,
                 weights: Mapping[str, float] | None, known: Sequence[str] = LEGS
                 ) -> tuple[list[float], list[float] | None]:
    """(convex weights summing to 1, rrf weights or None) of the legs of ``mode``. "hybrid"
    keeps its α (``weights`` apply to '+'-joined leg sets); one leg needs none. ``known``: the
    leg names ``weights`` may name."""
    if len(legs) == 1:
        return [1.0], None
    if weights is not None and mode != "hybrid":
        unknown = sorted(set(weights) - set(known) - set(LEGS))
        missing = [leg for leg in legs if leg not in weights]
        if unknown or missing:
            raise InvalidInputError(f"weights must name the legs of mode {mode!r} ({', '.join(legs)}); "
                                    f"unknown {unknown}, missing {missing}")
        w = [float(weights[leg]) for leg in legs]
        if any(not np.isfinite(x) or x < 0 for x in w) or sum(w) <= 0:
            raise InvalidInputError(f"weights must be finite, >= 0 and not all 0, got {dict(weights)}")
        return [x / sum(w) for x in w], w
    if mode == "hybrid" or (alpha_given and "dense" in legs and len(legs) > 1):
        rest = (1.0 - alpha) / (len(legs) - 1)
        return [alpha if leg == "dense" else rest for leg in legs], None
    return [1.0 / len(legs)] * len(legs), None


def calibrated_gate(legs: Sequence[str], gate_power: float | None = None) -> fusion_mod.AgreeParams:
    """The "calibrated" gate of a leg set: :data:`LEG_SET_CALIBRATED` (else
    :data:`CALIBRATED_GATE`), with ``gate_power`` when given (an index's own, FusionConfig.leg_sets)."""
    gate = LEG_SET_CALIBRATED.get(tuple(legs), CALIBRATED_GATE)
    return gate if gate_power is None else replace(gate, power=gate_power)


def calibrated_weights(legs: Sequence[str], weights: Sequence[float], calibration: FusionCalibration,
                       gate_power: float | None = None) -> list[float]:
    """The "calibrated" fusion's weights: each leg's ``weights[i]`` times the gate
    (:func:`calibrated_gate`) of its stored agreement with BM25 (retrieval/calibration.py); the
    bm25 leg and legs not calibrated keep theirs."""
    gate = calibrated_gate(legs, gate_power)
    return [w * calibration.gate(leg, gate) for w, leg in zip(weights, legs)]


def fuse_legs(lists: Sequence[Mapping[int, float]], weights: Sequence[float], cfg: FusionConfig,
              rrf_weights: Sequence[float] | None = None, anchor: int | None = None,
              agree_params: fusion_mod.AgreeParams | None = None, n_docs: int | None = None) -> dict:
    """Fuse one query's leg lists (doc number -> raw score) by ``cfg.method`` (its ``rrf_k``).
    Convex fusions weigh leg i by ``weights[i]``; rrf by ``rrf_weights`` (None: plain RRF);
    "agree" gates every leg but ``anchor`` (the index of the bm25 list) by its agreement with it
    (fusion.agree, with ``agree_params``: the leg set's :data:`LEG_SET_AGREE`; None: fusion's
    defaults; ``n_docs``: the collection size, for its chance correction). Empty lists (e.g. a
    query with no word in the BM25 vocabulary) drop out and the others keep their weights (an
    empty anchor: "agree" is plain z-score); one non-empty list is returned as it is. With two
    lists [dense, sparse] and weights [α, 1-α] this is the hybrid fusion."""
    return _fuse(lists, weights, cfg.method, cfg.rrf_k, rrf_weights, anchor, agree_params, n_docs)


def _fuse(lists: Sequence[Mapping[int, float]], weights: Sequence[float], method: str, rrf_k: int,
          rrf_weights: Sequence[float] | None = None, anchor: int | None = None,
          agree_params: fusion_mod.AgreeParams | None = None, n_docs: int | None = None) -> dict:
    keep = [i for i, run in enumerate(lists) if run]
    if len(keep) <= 1:
        return dict(lists[keep[0]]) if keep else {}
    runs = [lists[i] for i in keep]
    if method == "rrf":
        rw = None if rrf_weights is None else [rrf_weights[i] for i in keep]
        return fusion_mod.rrf(runs, k=rrf_k, weights=rw)
    w = [weights[i] for i in keep]
    if method == "agree":
        if anchor is None:
            raise InvalidInputError("fusion 'agree' needs an anchor list (the bm25 leg)")
        if anchor not in keep:
            return fusion_mod.zscore(runs, weights=w)
        return fusion_mod.agree(runs, weights=w, anchor=keep.index(anchor), params=agree_params, n_docs=n_docs)
    return fusion_mod.fuse(runs, method=method, weights=w)


def _legs_text(weights: Mapping[str, float]) -> str:
    return ", ".join(f"{leg} {w:.4g}" for leg, w in weights.items())
