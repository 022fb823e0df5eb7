"""The hybrid contract: the dense contract, the lexical recipe and the fusion, as one object.

Its fingerprint is the sha256 of its canonical JSON; :meth:`HybridContract.diff` names every
differing field with its side (``dense.pooling``, ``lexical.stemmer``, ``fusion.k``) and says
what the change means for an index built under the other contract (:class:`HybridDiffKind`).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from enum import Enum
from functools import cached_property
from typing import Any

from ctxemb_core.contract import DiffKind, EmbeddingContract, FieldChange
from ctxemb_core.errors import DataFormatError, InvalidContractError
from ctxemb_core.hybrid.fusion import Fusion
from ctxemb_core.hybrid.lexical import LexicalContract

__all__ = ["HybridContract", "HybridDiff", "HybridDiffKind"]

HYBRID_SCHEMA = 1
MAX_HYBRID_JSON = 1 << 20


class HybridDiffKind(str, Enum):
    """What a hybrid contract change means for an index built under the other one."""

    IDENTICAL = "identical"
    #: Only the dense model's name over the same weights: the same vectors.
    LABEL = "label"
    #: The fusion, or the dense query side only: nothing stored changes.
    QUERY_ONLY = "query_only"
    #: The lexical recipe (analyzer, k1, b, vocabulary): the lexical side is rebuilt, the dense
    #: vectors stay.
    LEXICAL_REINDEX = "lexical_reindex"
    #: The dense document vectors change: the dense side is re-embedded.
    REEMBED = "reembed"

    def __str__(self) -> str:
        return self.value


_ORDER = [
    HybridDiffKind.IDENTICAL,
    HybridDiffKind.LABEL,
    HybridDiffKind.QUERY_ONLY,
    HybridDiffKind.LEXICAL_REINDEX,
    HybridDiffKind.REEMBED,
]


@dataclass(frozen=True)
class HybridDiff:
    """The differing fields (``side.field``) between two hybrid contracts, and their meaning.

    ``kind`` is the strongest of the sides' kinds: a dense re-embed outranks a lexical re-index,
    which outranks a query-side change. ``reindex`` says which stored sides must be rebuilt.
    """

    changes: tuple[FieldChange, ...]
    kind: HybridDiffKind
    dense_kind: DiffKind

    @property
    def fields(self) -> tuple[str, ...]:
        return tuple(c.field for c in self.changes)

    @property
    def reindex(self) -> tuple[str, ...]:
        """The sides to rebuild: ``("dense",)``, ``("lexical",)``, both or none."""
        sides = []
        if self.dense_kind is DiffKind.REEMBED:
            sides.append("dense")
        if any(f.startswith("lexical.") for f in self.fields):
            sides.append("lexical")
        return tuple(sides)

    def __bool__(self) -> bool:
        return bool(self.changes)

    def __str__(self) -> str:
        if not self.changes:
            return "identical"
        return f"{self.kind.value}: " + "; ".join(str(c) for c in self.changes)


@dataclass(frozen=True)
class HybridContract:
    """The full recipe of a hybrid retrieval, pinned and fingerprinted.

    Attributes:
        dense: the bi-encoder's :class:`~ctxemb_core.EmbeddingContract`.
        lexical: the lexical recipe (:class:`~ctxemb_core.hybrid.LexicalContract`); fitted in a
            stamp (vocabulary digest set), a recipe on a query side.
        fusion: how the two rankings become one (:class:`~ctxemb_core.hybrid.Fusion`).
        schema: version of this format.

    Example:
        >>> from ctxemb_core import contract_for
        >>> from ctxemb_core.hybrid import HybridContract
        >>> h = HybridContract(contract_for("sentence-transformers/all-MiniLM-L6-v2"))
        >>> h.fusion.describe(), h.lexical.describe()
        ('rrf k=60 depth=100', 'bm25 lucene k1=1.5 b=0.75, english stemmer, stop words \\'en\\'')
    """

    dense: EmbeddingContract
    lexical: LexicalContract = field(default_factory=LexicalContract)
    fusion: Fusion = field(default_factory=Fusion)
    schema: int = HYBRID_SCHEMA

    def __post_init__(self) -> None:
        if not isinstance(self.dense, EmbeddingContract):
            raise InvalidContractError(
                f"dense must be an EmbeddingContract, got {type(self.dense).__name__}"
            )
        if not isinstance(self.lexical, LexicalContract):
            raise InvalidContractError(
                f"lexical must be a LexicalContract, got {type(self.lexical).__name__}"
            )
        if not isinstance(self.fusion, Fusion):
            raise InvalidContractError(f"fusion must be a Fusion, got {type(self.fusion).__name__}")
        if self.schema != HYBRID_SCHEMA:
            raise InvalidContractError(
                f"hybrid contract schema {self.schema!r} is not known to this ctxemb "
                f"(it reads schema {HYBRID_SCHEMA})"
            )

    # -- serialisation -----------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        return {
            "dense": self.dense.to_dict(),
            "lexical": self.lexical.to_dict(),
            "fusion": self.fusion.to_dict(),
            "schema": self.schema,
        }

    def to_json(self) -> str:
        """The canonical JSON: sorted keys, compact separators."""
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"), ensure_ascii=False)

    @cached_property
    def fingerprint(self) -> str:
        return hashlib.sha256(self.to_json().encode("utf-8")).hexdigest()

    @classmethod
    def from_dict(cls, data: Any) -> HybridContract:
        if not isinstance(data, dict):
            raise DataFormatError(
                f"a hybrid contract must be a JSON object, got {type(data).__name__}"
            )
        names = ["dense", "fusion", "lexical", "schema"]
        if sorted(data) != names:
            raise DataFormatError(
                f"not a ctxemb hybrid contract: fields {sorted(data)}, expected {names}"
            )
        return cls(
            EmbeddingContract.from_dict(data["dense"]),
            LexicalContract.from_dict(data["lexical"]),
            Fusion.from_dict(data["fusion"]),
            data["schema"],
        )

    @classmethod
    def from_json(cls, text: str | bytes) -> HybridContract:
        """Rebuild from :meth:`to_json` (strict: unknown or missing fields are an error)."""
        if isinstance(text, (str, bytes, bytearray)) and len(text) > MAX_HYBRID_JSON:
            raise DataFormatError(f"hybrid contract JSON of {len(text):,} characters is refused")
        try:
            data = json.loads(text, object_pairs_hook=_unique_keys)
        except (TypeError, ValueError, RecursionError) as exc:
            raise DataFormatError(f"hybrid contract JSON cannot be parsed: {exc}") from None
        return cls.from_dict(data)

    def with_(self, **changes: Any) -> HybridContract:
        """A copy with sides replaced (``dense=``, ``lexical=``, ``fusion=``)."""
        unknown = sorted(set(changes) - {"dense", "lexical", "fusion"})
        if unknown:
            raise InvalidContractError(f"unknown hybrid contract fields {unknown}")
        values = {"dense": self.dense, "lexical": self.lexical, "fusion": self.fusion}
        return HybridContract(**{**values, **changes}, schema=self.schema)

    def recipe(self) -> HybridContract:
        """This contract with the lexical side as a recipe (no fitted vocabulary)."""
        return self.with_(lexical=self.lexical.recipe())

    # -- comparison --------------------------------------------------------------------------

    def diff(self, caller: HybridContract) -> HybridDiff:
        """The fields in which ``caller`` differs from ``self`` (the index's stamp).

        The lexical vocabulary is compared only when the caller pins one (see
        :meth:`LexicalContract.changes`).
        """
        if not isinstance(caller, HybridContract):
            raise InvalidContractError(
                f"can only diff two hybrid contracts, got {type(caller).__name__}"
            )
        dense = self.dense.diff(caller.dense)
        changes = [FieldChange(f"dense.{c.field}", c.index, c.caller) for c in dense.changes]
        lexical = self.lexical.changes(caller.lexical)
        changes += [FieldChange(f"lexical.{c.field}", c.index, c.caller) for c in lexical]
        a, b = self.fusion.to_dict(), caller.fusion.to_dict()
        fusion = [FieldChange(f"fusion.{k}", a[k], b[k]) for k in a if a[k] != b[k]]
        changes += fusion
        kinds = [
            {
                DiffKind.IDENTICAL: HybridDiffKind.IDENTICAL,
                DiffKind.LABEL: HybridDiffKind.LABEL,
                DiffKind.QUERY_ONLY: HybridDiffKind.QUERY_ONLY,
                DiffKind.REEMBED: HybridDiffKind.REEMBED,
            }[dense.kind]
        ]
        if lexical:
            kinds.append(HybridDiffKind.LEXICAL_REINDEX)
        if fusion:
            kinds.append(HybridDiffKind.QUERY_ONLY)
        return HybridDiff(tuple(changes), max(kinds, key=_ORDER.index), dense.kind)

    def describe(self) -> str:
        return (
            f"{self.dense.describe()} + {self.lexical.describe()}; fusion {self.fusion.describe()} "
            f"[{self.fingerprint[:12]}]"
        )


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise DataFormatError(f"hybrid contract JSON repeats the key {key!r}")
        out[key] = value
    return out
