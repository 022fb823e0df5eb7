"""The stamped lexical side of a guarded store, as the Haystack components read and write it.

Below the components (:mod:`._hybrid` reads through it, the writer of :mod:`._components`
writes through it). Everything decided here is core's: the folder is ``ctxemb_chroma``'s (an
embedded Chroma store keeps it at ``<store path>/ctxemb-lexical/<collection>``), the stamp, the
checks and the files are :mod:`ctxemb_core.hybrid`'s, so an index written here is the one
``ctxemb_chroma.open_hybrid`` and ``ctxemb query --hybrid`` open, and the other way round.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ctxemb_core.errors import InvalidInputError
from ctxemb_core.hybrid import (
    Fusion,
    HybridContract,
    HybridStamp,
    LexicalContract,
    LexicalIndex,
    lexical_exists,
    save_lexical,
)
from ctxemb_core.hybrid.guard import check_caller, reload_if_moved
from ctxemb_core.hybrid.pair import open_hybrid, stored_records
from ctxemb_core.hybrid.store import read_stamp

#: The metadata key of a document found by :class:`ContractLexicalRetriever` (and of every
#: fused document): the fingerprint of the hybrid contract (the stamp) it was found under.
HYBRID_KEY = "ctxemb_hybrid"

_SEEN: OrderedDict[str, HybridContract] = OrderedDict()
_SEEN_LOCK = threading.Lock()


def remember(contract: HybridContract) -> None:
    """Keep a stamp's contract by fingerprint: the joiner names the fields of a mismatch."""
    with _SEEN_LOCK:
        _SEEN[contract.fingerprint] = contract
        _SEEN.move_to_end(contract.fingerprint)
        while len(_SEEN) > 64:
            _SEEN.popitem(last=False)


def recall(fingerprint: Any) -> HybridContract | None:
    """The hybrid contract a lexical retriever of this process read under ``fingerprint``."""
    with _SEEN_LOCK:
        return _SEEN.get(fingerprint) if isinstance(fingerprint, str) else None


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
    """The lexical folder of a ``ChromaDocumentStore`` or ``PgvectorDocumentStore`` index.

    Args:
        guard: the guard of the document store whose dense side the lexical side belongs to
            (:func:`~ctxemb_haystack._stores.guard_for`).
        lexical_path: the folder; ``None`` for an embedded Chroma store derives it as
            ``ctxemb_chroma.lexical_folder`` does.
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
        if not hasattr(guard, "opened"):
            raise TypeError(
                "hybrid retrieval keeps its stamp beside a stamped store: use a "
                "ChromaDocumentStore or a PgvectorDocumentStore (an InMemoryDocumentStore has "
                "no stamp to keep it beside)"
            )
        self.lexical_path = lexical_path
        self.lexical, self.fusion = lexical, fusion
        self._folder: Path | None = None
        self._index: LexicalIndex | None = None
        self._stamp: HybridStamp | None = None
        self._digests: dict[str, str] = {}

    @property
    def where(self) -> str:
        return repr(self.guard.name)

    def folder(self) -> Path:
        if self._folder is None:
            if self.lexical_path is not None:
                self._folder = Path(self.lexical_path)
            elif hasattr(self.guard, "client"):
                from ctxemb_chroma import lexical_folder

                self._folder = lexical_folder(self.guard.client(), self.guard.name)
            else:
                raise InvalidInputError(
                    "a PgvectorDocumentStore's lexical side lives in a folder of this machine: "
                    "give lexical_path"
                )
        return self._folder

    def stated(self, stamp: HybridContract) -> HybridContract:
        """The stamp's contract with the recipe the caller states (the stamp's where none)."""
        return stamp.with_(
            lexical=self.lexical if self.lexical is not None else stamp.lexical,
            fusion=self.fusion if self.fusion is not None else stamp.fusion,
        )

    def caller(self, stamp: HybridContract) -> HybridContract:
        """The stamp's contract once the stated recipe is found to be it (fields named)."""
        return check_caller(stamp, self.stated(stamp), where=self.where)

    def current(self) -> tuple[LexicalIndex, HybridStamp]:
        """The lexical side as stored now, checked: read again only when the ``current``
        pointer names another version (another process wrote), else one small file read."""
        moved = reload_if_moved(self.folder(), self._stamp, self.stated, where=self.where)
        if moved is not None:
            index, stamp = moved
            remember(stamp.contract)
            self._index, self._stamp = index, stamp
            self._digests = dict(zip(index.ids, index.digests, strict=True))
        assert self._index is not None and self._stamp is not None
        return self._index, self._stamp

    def digests(self) -> dict[str, str]:
        """Each id's text digest on the lexical side as :meth:`current` last loaded it."""
        return self._digests

    def dense(self, contract: Any) -> Any:
        """The dense side opened through the store's guard under the stamp's dense contract
        (refused when the store is stamped with another)."""
        return self.guard.opened(contract, create=False)

    # -- writing (ContractDocumentWriter with hybrid=True) -------------------------------------

    def check_write(self, fingerprint: str) -> None:
        """Before the dense write: an existing stamp holds the stated recipe and the documents'
        dense contract, or nothing is written."""
        from ctxemb_core.documents import check_fingerprint

        folder = self.folder()
        if lexical_exists(folder):
            stamp = read_stamp(folder)[0].contract
            self.caller(stamp)
            check_fingerprint(fingerprint, stamp.dense)

    def write(self, fingerprint: str, ids: Sequence[str]) -> None:
        """After the dense write: the lexical side built from the dense side's stored texts (a
        new index), or brought in step for ``ids`` (their texts as the dense side stored them)."""
        dense = self.dense(self.guard.caller(fingerprint))
        folder = self.folder()
        if not lexical_exists(folder):
            open_hybrid(dense, folder, lexical=self.lexical, fusion=self.fusion, create=True)
            return
        index, stamp = self.current()
        stored = stored_records(dense, ids)
        have = self.digests()
        todo = [i for i in stored if have.get(i) != stored[i][1]]
        gone = [i for i in ids if i not in stored and i in have]
        if todo or gone:
            new = index.updated(todo, [stored[i][0] for i in todo], delete=gone)
            save_lexical(folder, new, stamp.contract.with_(lexical=new.contract))
