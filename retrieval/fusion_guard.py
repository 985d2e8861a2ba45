"""The per-query guard of the calibrated fusion: a leg that stops agreeing with BM25 on a query
fades out of that query's fusion.

The calibrated fusion (retrieval/calibration.py) weighs each LLM leg once per index, from its
mean agreement ``ā`` with the BM25 leg on pseudo-queries cut from the corpus. Real queries can
differ from those pseudo-queries in form (capitals, no punctuation) or distribution, and a leg
that agreed on the pseudo-queries may be noise on them; the stored weight would keep it in. The
guard measures every query's own agreement ``o`` of the leg with BM25, the same way the
calibration measured ``ā`` (chance-corrected top 10 against the other's top 50, both ways), and
multiplies the leg's calibrated weight by

    guard(o, ā) = clip((o / ā - floor) / (ratio - floor), 0, 1) ** power

full weight while the query agrees at least ``ratio`` times as well as the pseudo-queries did,
none at ``floor`` times or below (0: chance), a ramp between. With ``joint`` the LLM legs share
one factor, that of the mean of their ``o / ā``: they read one hidden state of one encoder
pass, so a query the encoder misreads misleads both, and the mean of two noisy agreements is
a steadier sign of it than either (on a small collection a list of another query still
overlaps BM25's top 50 by chance). The BM25 leg, legs without a stored agreement, and queries
whose BM25 list is empty are left alone. ``ratio`` 0 turns the guard off. The default (:data:`CALIBRATED_GUARD`) was chosen on dumped leg lists with real, shuffled
and query-shifted queries (benchmarks/defaults/fusion_guard.py).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Mapping, Sequence

from alignir.errors import InvalidInputError
from alignir.retrieval.calibration import FusionCalibration
from alignir.retrieval.fusion import AgreeParams

__all__ = ["FusionGuard", "CALIBRATED_GUARD", "ANCHOR"]

ANCHOR = "bm25"


def _number(name: str, v: object) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not v == v or v in (float("inf"), -float("inf")):
        raise InvalidInputError(f"fusion guard {name} must be a finite number, got {v!r}")
    return float(v)


@dataclass(frozen=True)
class FusionGuard:
    """``ratio``: the share of the stored agreement at which a leg keeps its full weight (0: no
    guard); ``floor``: the share at or below which it drops out (< ratio); ``power``: the ramp's
    shape between them; ``joint``: one factor for all LLM legs, from the mean of their shares."""

    ratio: float = 0.75
    floor: float = 0.0
    power: float = 1.0
    joint: bool = False

    def __post_init__(self) -> None:
        if _number("ratio", self.ratio) < 0:
            raise InvalidInputError(f"fusion guard ratio must be >= 0, got {self.ratio}")
        if self.ratio > 0 and not 0 <= _number("floor", self.floor) < self.ratio:
            raise InvalidInputError(f"fusion guard floor must be in [0, ratio={self.ratio}), got {self.floor}")
        if not _number("power", self.power) > 0:
            raise InvalidInputError(f"fusion guard power must be > 0, got {self.power}")
        if not isinstance(self.joint, bool):
            raise InvalidInputError(f"fusion guard joint must be true or false, got {self.joint!r}")

    @property
    def active(self) -> bool:
        return self.ratio > 0

    def factor(self, o: float, a: float) -> float:
        """The weight factor of a leg whose agreement with BM25 is ``o`` on this query and ``a``
        on the pseudo-queries (1 when off or ``a`` is 0: nothing to compare with)."""
        if not self.active or a <= 0:
            return 1.0
        return self.ramp(o / a)

    def ramp(self, share: float) -> float:
        """The factor of a query agreeing ``share`` times as well as the pseudo-queries."""
        x = (share - self.floor) / (self.ratio - self.floor)
        return min(1.0, max(0.0, x)) ** self.power

    def factors(self, legs: Sequence[str], lists: Sequence[Mapping[Any, float]], calibration: FusionCalibration,
                n_docs: int | None = None) -> list[float]:
        """Each leg's factor on one query (``lists`` in ``legs`` order; ``n_docs``: the number
        of documents searched, for the chance correction; None: the union of the lists)."""
        if not self.active or ANCHOR not in legs or not lists[legs.index(ANCHOR)]:
            return [1.0] * len(legs)
        anchor = lists[legs.index(ANCHOR)]
        measure = measure_of(calibration)
        population = n_docs if n_docs else len({d for run in lists for d in run})
        shares: dict[int, float] = {}
        for i, (leg, run) in enumerate(zip(legs, lists)):
            a = calibration.agreement.get(leg)
            if leg != ANCHOR and a is not None and a > 0 and run:
                shares[i] = measure.agreement(run, anchor, population) / a
        if self.joint and shares:
            mean = sum(shares.values()) / len(shares)
            shares = dict.fromkeys(shares, mean)
        return [self.ramp(shares[i]) if i in shares else 1.0 for i in range(len(legs))]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def measure_of(calibration: FusionCalibration) -> AgreeParams:
    """How the calibration measured agreement (its stored settings), to measure a query alike."""
    return AgreeParams(**{k: v for k, v in calibration.measure.items() if k in ("k", "depth", "symmetric", "chance")})


#: The default guard of the calibrated fusion: both LLM legs at full weight while the mean of
#: their shares is >= 0.75, fading linearly to 0 at chance. Chosen by
#: benchmarks/defaults/fusion_guard.py (results/fusion_guard.json) over 16 ADI leg-list dumps
#: (the default model's ten text-form settings, six of other shipped or base models) x real,
#: shuffled and query-shifted queries: among the 61 candidates costing natural queries <= 0.005
#: mean nDCG@10 (this one 0.004), the best worst margin to BM25 (-0.029, a query-shifted unit;
#: no guard: -0.114). On dumps not used in the choice (MED: five text-form settings and 16-token
#: documents; Cranfield: 16-token documents) its worst margin is -0.006 (query-shifted MED, where
#: no guard gives -0.27), and it costs natural MED queries nothing (0.7715 -> 0.7739). With
#: smollm2-135m-alignir at 512 tokens on MED, CISI, Cranfield and SciFact (real, shuffled and
#: shuffled-dense legs: with the 10 cheaper settings, all 22 of the never-below-BM25 benchmark) every
#: unit stays >= BM25 - 0.005 (worst -0.002); it costs natural CISI queries 0.013, SciFact's 0.003.
CALIBRATED_GUARD = FusionGuard(ratio=0.75, joint=True)
