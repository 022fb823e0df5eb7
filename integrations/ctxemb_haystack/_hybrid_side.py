"""The stamped lexical side of a guarded store, as the Haystack components read and write it.

Below the components (:mod:`._hybrid` reads through it, the writer of :mod:`._components`
writes through it). Everything decided here is core's: the side is opened by the store's own
``open_hybrid`` (``ctxemb_chroma``: SQLite at ``<store path>/ctxemb-lexical/<collection>``;
``ctxemb_pgvector``: tables of the same database), the stamp, the checks and the rows are
:mod:`ctxemb_core.hybrid`'s, so an index written here is the one ``ctxemb query --hybrid``
opens, and the other way round.
"""

from __future__ import annotations

import threading
import uuid
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

from ctxemb_core.errors import InvalidInputError
from ctxemb_core.hybrid import (
    Fusion,
    HybridContract,
    HybridStamp,
    LexicalContract,
    NoLexicalSideError,
)
from ctxemb_core.hybrid.guard import check_caller
from ctxemb_core.hybrid.pair import HybridIndex

#: The metadata key of a document found by :class:`ContractLexicalRetriever` (and of every
#: fused document): the fingerprint of the hybrid contract (the stamp) it was found under.
HYBRID_KEY = "ctxemb_hybrid"

#: Each stamp a lexical retriever of this process read, by fingerprint, with the side it was read
#: from (the fingerprint holds the fitted vocabulary, so it names one side's state).
_SEEN: OrderedDict[str, tuple[HybridContract, LexicalSide | None]] = OrderedDict()
_SEEN_LOCK = threading.Lock()

#: Each side a lexical retriever of this process read, by its token (:attr:`LexicalSide.token`,
#: what :class:`SideStamp` names): kept while its stamp is (a retriever may be gone before its
#: joiner runs).
_SIDES: OrderedDict[str, LexicalSide] = OrderedDict()


class SideStamp(str):
    """The ``hybrid`` a lexical retriever outputs: the stamp's fingerprint, naming the side it
    was read from too. Two indexes of one corpus and recipe share a fingerprint, not a side,
    and the joiner checks what it fuses against the side read (its lexical documents may be
    none: a stale document found on the dense side only)."""

    side: str

    def __new__(cls, fingerprint: str, side: str) -> SideStamp:
        stamp = super().__new__(cls, fingerprint)
        stamp.side = side
        return stamp

    def __reduce__(self) -> tuple[Any, ...]:
        return (SideStamp, (str(self), self.side))


def remember(contract: HybridContract, side: LexicalSide | None = None) -> None:
    """Keep a stamp's contract by fingerprint, with the side it was read from: the joiner names
    the fields of a mismatch, and checks the documents it fuses against that side."""
    with _SEEN_LOCK:
        _SEEN[contract.fingerprint] = (contract, side)
        _SEEN.move_to_end(contract.fingerprint)
        if side is not None:
            _SIDES[side.token] = side
            _SIDES.move_to_end(side.token)
        for kept in (_SEEN, _SIDES):
            while len(kept) > 64:
                kept.popitem(last=False)


def _seen(fingerprint: Any) -> tuple[HybridContract | None, LexicalSide | None]:
    with _SEEN_LOCK:
        seen = _SEEN.get(fingerprint) if isinstance(fingerprint, str) else None
    return (None, None) if seen is None else seen


def recall(fingerprint: Any) -> HybridContract | None:
    """The hybrid contract a lexical retriever of this process read under ``fingerprint``."""
    return _seen(fingerprint)[0]


def side_of(hybrid: Any) -> LexicalSide | None:
    """The side a lexical retriever of this process read: the one a :class:`SideStamp` names
    while it lives, else the last read under stamp fingerprint ``hybrid``."""
    with _SEEN_LOCK:
        side = _SIDES.get(hybrid.side) if isinstance(hybrid, SideStamp) else None
    return side if side is not None else _seen(str(hybrid) if isinstance(hybrid, str) else None)[1]


def recipe(value: Any, kind: type[Any], name: str) -> Any:
    """A :class:`LexicalContract` / :class:`Fusion` (or its ``to_dict``), or ``None``."""
    if value is None or isinstance(value, kind):
        return value
    if isinstance(value, dict):
        return kind.from_dict(value)
    raise InvalidInputError(
        f"{name} must be a {kind.__name__}, its to_dict() or None, got {type(value).__name__}"
    )


def as_dict(value: LexicalContract | Fusion | None) -> dict[str, Any] | None:
    return None if value is None else value.to_dict()


class LexicalSide:
    """The lexical side of a ``ChromaDocumentStore`` or ``PgvectorDocumentStore`` index.

    Args:
        guard: the :class:`~ctxemb_haystack._index.IndexGuard` of the document store whose
            dense side the lexical side belongs to (:func:`~ctxemb_haystack._stores.guard_for`).
        lexical_path: Chroma: the side's folder (``None`` for an embedded store: as
            ``ctxemb_chroma.lexical_folder`` derives it); PostgreSQL keeps the side in the
            table's database (a path given names an old lexical folder to convert once).
        lexical, fusion: the recipe the caller states (``None``: the stamp's).
    """

    def __init__(
        self,
        guard: Any,
        lexical_path: str | None,
        lexical: LexicalContract | None,
        fusion: Fusion | None,
    ) -> None:
        if lexical_path is not None and not isinstance(lexical_path, str):
            raise InvalidInputError(
                f"lexical_path must be a string, got {type(lexical_path).__name__}"
            )
        self.guard = guard
        if not hasattr(guard, "binding"):
            raise TypeError(
                "hybrid retrieval keeps its stamp beside a stamped store: use a "
                "ChromaDocumentStore or a PgvectorDocumentStore (an InMemoryDocumentStore has "
                "no stamp to keep it beside)"
            )
        self.lexical_path = lexical_path
        self.lexical, self.fusion = lexical, fusion
        self._hybrid: HybridIndex | None = None
        self._lock = threading.Lock()
        self.token = uuid.uuid4().hex  # what its SideStamp names it by

    def params(self) -> dict[str, Any]:
        """What a writer's ``to_dict`` records of its lexical side."""
        recipes = {"lexical": as_dict(self.lexical), "fusion": as_dict(self.fusion)}
        return {"hybrid": True, "lexical_path": self.lexical_path, **recipes}

    @property
    def where(self) -> str:
        return repr(self.guard.name)

    def stamped_dense(self) -> Any:
        """The contract the dense side's stamp holds (read, not verified), or ``None`` when the
        store holds no stamped index of this name yet."""
        return self.guard.stamped()

    def open(self, contract: Any, *, create: bool, refresh: bool = False) -> HybridIndex:
        """The hybrid index as the store's ``open_hybrid`` opens it (the side checked whole)."""
        return self.guard.binding.open_hybrid(
            contract,
            lexical=self.lexical,
            fusion=self.fusion,
            lexical_path=self.lexical_path,
            create=create,
            refresh=refresh,
        )

    def stated(self, stamp: HybridContract) -> HybridContract:
        """The stamp's contract with the recipe the caller states (the stamp's where none)."""
        return stamp.with_(
            lexical=self.lexical if self.lexical is not None else stamp.lexical,
            fusion=self.fusion if self.fusion is not None else stamp.fusion,
        )

    def caller(self, stamp: HybridContract) -> HybridContract:
        """The stamp's contract once the stated recipe is found to be it (fields named)."""
        return check_caller(stamp, self.stated(stamp), where=self.where)

    def hybrid(self, *, refresh: bool = False) -> HybridIndex:
        """The hybrid index, opened once under the dense side's stamped contract (each call
        then re-reads the lexical stamp: another process's fusion or recipe is followed, or
        refused); ``refresh`` (a writer's) mends a side found out of step.

        Raises:
            NoLexicalSideError: no stamped index here yet, or no lexical side beside it.
        """
        with self._lock:
            if self._hybrid is None:
                contract = self.stamped_dense()
                if contract is None:
                    raise NoLexicalSideError(
                        f"{self.where} holds no stamped index and so no lexical side; write it "
                        "with ContractDocumentWriter(..., hybrid=True)"
                    )
                self._hybrid = self.open(contract, create=False, refresh=refresh)
            return self._hybrid

    def search(self, query: str, k: int | None) -> tuple[list[tuple[str, float]], HybridStamp]:
        """The lexical hits of ``query`` under the stamp, the stated recipe checked."""
        hybrid = self.hybrid()
        stamp = hybrid.current()
        self.caller(stamp.contract)
        remember(stamp.contract, self)
        depth = k or stamp.contract.fusion.depth
        hits, stamp = hybrid.lexical_search(query, depth, lexical=self.lexical, fusion=self.fusion)
        remember(stamp.contract, self)
        return hits, stamp

    # -- writing (ContractDocumentWriter with hybrid=True) -------------------------------------

    def check_write(self, fingerprint: str) -> None:
        """Before the dense write: an existing stamp holds the stated recipe and the documents'
        dense contract, or nothing is written."""
        from ctxemb_core.documents import check_fingerprint

        try:
            stamp = self.hybrid(refresh=True).current().contract
        except NoLexicalSideError:
            return
        self.caller(stamp)
        check_fingerprint(fingerprint, stamp.dense)

    def write(self, fingerprint: str, ids: Sequence[str]) -> None:
        """After the dense write: the lexical side built from the dense side's stored texts (a
        new index), or brought in step for ``ids`` (their texts as the dense side stored them)."""
        contract = self.guard.caller(fingerprint)
        with self._lock:
            if self._hybrid is None or not self._hybrid.lexical.exists():
                self._hybrid = self.open(contract, create=True, refresh=True)
            hybrid = self._hybrid
        hybrid.take(list(ids))
