"""How a dense and a lexical ranking become one: the fusion, pinned as part of the contract.

Two methods, each with every parameter stated:

- ``rrf`` (reciprocal-rank fusion, Cormack et al. 2009): a document's score is the sum over the
  two rankings of ``1 / (k + rank)``, ranks from 1; ``k`` = 60 is the published constant.
- ``weighted``: each ranking's scores normalised (``minmax``: to [0, 1] over that ranking's
  candidates), then ``weights[0] * dense + weights[1] * lexical``; a document absent from one
  ranking scores 0 there.

``depth`` is how many candidates each side contributes before fusing. A fusion change alters
no stored vector or term, so it is a query-side change (:class:`~ctxemb_core.hybrid.HybridDiff`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ctxemb_core.errors import DataFormatError, InvalidContractError

__all__ = ["Fusion", "fuse"]

FUSION_SCHEMA = 1
METHODS = ("rrf", "weighted")
NORMALIZATIONS = ("minmax",)
#: The constant of the reciprocal-rank fusion paper (Cormack, Clarke and Büttcher, SIGIR 2009).
RRF_K = 60


@dataclass(frozen=True)
class Fusion:
    """The fusion recipe (see the module docstring).

    Attributes:
        method: ``rrf`` or ``weighted``.
        k: ``rrf`` only: the rank constant (≥ 1).
        weights: ``weighted`` only: ``(dense, lexical)``, non-negative, not both 0.
        normalization: ``weighted`` only: ``minmax``.
        depth: candidates taken from each side (≥ 1).
        schema: version of this format.
    """

    method: str = "rrf"
    k: int | None = RRF_K
    weights: tuple[float, float] | None = None
    normalization: str | None = None
    depth: int = 100
    schema: int = FUSION_SCHEMA

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise InvalidContractError(
                f"fusion method must be one of {METHODS}, got {self.method!r}"
            )
        _count(self.depth, "fusion depth")
        if self.method == "rrf":
            _count(self.k, "fusion k")
            if self.weights is not None or self.normalization is not None:
                raise InvalidContractError(
                    "rrf fusion takes k only; weights and normalization belong to 'weighted'"
                )
        else:
            if self.k is not None and self.k != RRF_K:
                raise InvalidContractError("weighted fusion takes no k (it belongs to 'rrf')")
            object.__setattr__(self, "k", None)
            weights = self.weights
            if (
                not isinstance(weights, (tuple, list))
                or len(weights) != 2
                or any(
                    isinstance(w, bool) or not isinstance(w, (int, float)) or not math.isfinite(w)
                    for w in weights
                )
                or min(weights) < 0
                or sum(weights) <= 0
            ):
                raise InvalidContractError(
                    "weighted fusion needs weights (dense, lexical): two finite numbers >= 0, "
                    f"not both 0; got {weights!r}"
                )
            object.__setattr__(self, "weights", (float(weights[0]), float(weights[1])))
            if self.normalization is None:
                object.__setattr__(self, "normalization", "minmax")
            if self.normalization not in NORMALIZATIONS:
                raise InvalidContractError(
                    f"normalization must be one of {NORMALIZATIONS}, got {self.normalization!r}"
                )
        if self.schema != FUSION_SCHEMA:
            raise InvalidContractError(f"fusion schema {self.schema!r} is not known to this ctxemb")

    def to_dict(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        if out["weights"] is not None:
            out["weights"] = list(out["weights"])
        return out

    @classmethod
    def from_dict(cls, data: Any) -> Fusion:
        if not isinstance(data, dict):
            raise DataFormatError(f"a fusion must be a JSON object, got {type(data).__name__}")
        names = [f.name for f in dataclasses.fields(cls)]
        unknown, missing = sorted(set(data) - set(names)), [n for n in names if n not in data]
        if unknown or missing:
            raise DataFormatError(
                f"not a ctxemb fusion: missing {missing}, unknown {unknown}; the fields are {names}"
            )
        data = dict(data)
        if isinstance(data["weights"], list):
            data["weights"] = tuple(data["weights"])
        return cls(**data)

    def with_(self, **changes: Any) -> Fusion:
        return dataclasses.replace(self, **changes)

    def describe(self) -> str:
        if self.method == "rrf":
            return f"rrf k={self.k} depth={self.depth}"
        assert self.weights is not None
        return (
            f"weighted {self.normalization} dense={self.weights[0]:g} "
            f"lexical={self.weights[1]:g} depth={self.depth}"
        )


def fuse(
    fusion: Fusion,
    dense: Sequence[tuple[str, float]],
    lexical: Sequence[tuple[str, float]],
    n: int | None = None,
) -> list[tuple[str, float]]:
    """The fused ranking of two rankings (best first), each cut to ``fusion.depth`` first.

    Args:
        fusion: the recipe.
        dense: ``(id, score)`` best first (higher scores better).
        lexical: the same for the lexical side.
        n: how many to return (all by default).

    Ties are broken by id, so the result does not depend on dictionary order.
    """
    dense, lexical = list(dense)[: fusion.depth], list(lexical)[: fusion.depth]
    scores: dict[str, float] = {}
    if fusion.method == "rrf":
        assert fusion.k is not None
        for ranking in (dense, lexical):
            for rank, (doc, _) in enumerate(ranking, start=1):
                scores[doc] = scores.get(doc, 0.0) + 1.0 / (fusion.k + rank)
    else:
        assert fusion.weights is not None
        for weight, ranking in zip(fusion.weights, (dense, lexical), strict=True):
            if not ranking:
                continue
            values = [s for _, s in ranking]
            low, high = min(values), max(values)
            for doc, s in ranking:
                norm = 1.0 if high == low else (s - low) / (high - low)
                scores[doc] = scores.get(doc, 0.0) + weight * norm
    ranked = sorted(scores.items(), key=lambda item: (-item[1], item[0]))
    return ranked if n is None else ranked[:n]


def _count(value: Any, what: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidContractError(f"{what} must be an integer >= 1, got {value!r}")
