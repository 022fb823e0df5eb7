"""The lexical half of a hybrid Haystack pipeline: BM25 from the stamped lexical side, refused
under another lexical recipe or fusion (field named); :mod:`._fusion` joins it with the dense
half."""

from __future__ import annotations

from typing import Any

from haystack import Document, component, default_to_dict

from ctxemb_core.errors import InvalidInputError, OutOfStepError
from ctxemb_core.guard import OPEN_SAMPLE
from ctxemb_core.hybrid import Fusion, LexicalContract
from ctxemb_core.hybrid.pair import stored_records
from ctxemb_core.validate import check_positive_int
from ctxemb_haystack._base import Serialised, in_thread
from ctxemb_haystack._hybrid_side import HYBRID_KEY, LexicalSide, SideStamp, as_dict, recipe
from ctxemb_haystack._stores import guard_for


def _top_k(value: Any) -> int | None:
    return None if value is None else check_positive_int(value, "top_k")


@component
class ContractLexicalRetriever(Serialised):
    """BM25 over the stamped lexical side of a store's index (see ``ctxemb_chroma.open_hybrid``).

    The hits' texts and metadata are read from the store itself, through the same guard the
    :class:`ContractRetriever` reads through (the lexical side keeps ids and text digests only),
    so a lexical hit is a whole document whether or not the dense side also found it; each
    text's digest must be the one the lexical side was fitted on, and both sides must hold as
    many documents, else :class:`~ctxemb_core.errors.OutOfStepError` names the ids. The stamp is
    re-read on every call (one row of the lexical store).

    Each document's ``score`` is its BM25 score and ``meta["ctxemb_hybrid"]`` the stamp's hybrid
    fingerprint; the ``hybrid`` output is that fingerprint, for :class:`ContractFusionJoiner`
    (a ``str`` that also names the side read, which the joiner checks what it fuses against).

    Args:
        document_store: a ``ChromaDocumentStore`` or ``PgvectorDocumentStore`` (the dense side).
        lexical_path: Chroma: the lexical side's folder; ``None`` for an embedded store:
            ``<persist_path>/ctxemb-lexical/<collection_name>``, as ``ctxemb_chroma`` keeps it.
            A ``PgvectorDocumentStore`` keeps its lexical side in its own database.
        lexical: the lexical recipe the caller states (``None``: the stamp's); another one is
            refused (:class:`~ctxemb_core.errors.HybridMismatchError`, ``lexical.stemmer`` …).
        fusion: the fusion the caller states, checked the same way (``fusion.k`` …).
        top_k: hits returned; ``None``: the stamp's fusion depth (what the fusion reads).

    Example:
        >>> retriever = ContractLexicalRetriever(store, top_k=20)  # doctest: +SKIP
        >>> retriever.run("how is green tea made")["documents"][0].id  # doctest: +SKIP
        'tea'
    """

    def __init__(
        self,
        document_store: Any,
        lexical_path: str | None = None,
        *,
        lexical: LexicalContract | dict[str, Any] | None = None,
        fusion: Fusion | dict[str, Any] | None = None,
        top_k: int | None = None,
    ) -> None:
        self.document_store = document_store
        self.lexical_path = lexical_path
        self.lexical = recipe(lexical, LexicalContract, "lexical")
        self.fusion = recipe(fusion, Fusion, "fusion")
        self.top_k = _top_k(top_k)
        guard = guard_for(document_store, OPEN_SAMPLE)
        self._side = LexicalSide(guard, lexical_path, self.lexical, self.fusion)

    def to_dict(self) -> dict[str, Any]:
        return default_to_dict(
            self,
            document_store=self.document_store,
            lexical_path=self.lexical_path,
            lexical=as_dict(self.lexical),
            fusion=as_dict(self.fusion),
            top_k=self.top_k,
        )

    @component.output_types(documents=list[Document], hybrid=str)
    def run(self, query: str, top_k: int | None = None) -> dict[str, Any]:
        """The BM25 hits of ``query``, best first, after the recipe is checked.

        Raises:
            HybridMismatchError: the stated lexical recipe or fusion is not the stamp's.
            ContractMismatchError: the store is stamped with another dense contract.
            OutOfStepError: the sides hold other documents (ids named where known).
            EncoderDriftError: the analyzer here makes other terms than the stamp's canary.
            MissingStampError: no lexical side.
        """
        if not isinstance(query, str):
            raise InvalidInputError(f"a query must be a string, got {type(query).__name__}")
        k = _top_k(top_k) or self.top_k
        hits, stamp = self._side.search(query, k)
        contract = stamp.contract
        dense = self._side.hybrid().dense  # opened by the store's open_hybrid, verified
        stored = stored_records(dense, [i for i, _ in hits]) if hits else {}
        have = self._side.hybrid().lexical.digests([i for i, _ in hits])
        missing = [i for i, _ in hits if i not in stored]
        changed = [i for i, _ in hits if i in stored and stored[i][1] != have.get(i)]
        if missing or changed:
            raise OutOfStepError(self._side.where, (), missing, changed)
        documents = [
            Document(
                id=i,
                content=stored[i][0],
                meta={**stored[i][2], HYBRID_KEY: contract.fingerprint},
                score=s,
            )
            for i, s in hits
        ]
        return {"documents": documents, "hybrid": SideStamp(contract.fingerprint, self._side.token)}

    run_async = in_thread(run)
