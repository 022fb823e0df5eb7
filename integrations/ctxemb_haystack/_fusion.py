"""The fusion of a hybrid Haystack pipeline: the dense and the lexical documents of one query
joined under the stamp's fusion, after the fusion, the dense contract and the lexical documents'
stamp are checked."""

from __future__ import annotations

import dataclasses
from typing import Any

from haystack import Document, component, default_to_dict

from ctxemb_core.contract import same_contract
from ctxemb_core.documents import FINGERPRINT_KEY, check_fingerprint
from ctxemb_core.errors import HybridMismatchError, InvalidInputError, MissingStampError
from ctxemb_core.hybrid import Fusion, fuse
from ctxemb_core.hybrid.guard import check_caller
from ctxemb_core.validate import check_positive_int
from ctxemb_haystack._base import Serialised, documents_of, in_thread
from ctxemb_haystack._hybrid_side import HYBRID_KEY, as_dict, recall, recipe, side_of


@component
class ContractFusionJoiner(Serialised):
    """Joins the dense and the lexical documents of one query under the stamp's fusion.

    Connect :class:`ContractRetriever`'s ``documents`` to ``dense_documents``,
    :class:`ContractLexicalRetriever`'s ``documents`` and ``hybrid`` to ``lexical_documents`` and
    ``hybrid``, and :class:`ContractTextEmbedder`'s ``fingerprint`` to ``fingerprint``. Refused
    (nothing returned) when the stated fusion is not the stamp's
    (:class:`~ctxemb_core.errors.HybridMismatchError`, ``fusion.k`` …), when the query (or a
    dense document) was embedded under another dense contract than the stamp's
    (:class:`~ctxemb_core.errors.ContractMismatchError`, fields named), when a lexical document
    was found under another hybrid contract than ``hybrid``, or when a document to be returned
    is on one side only or holds another text on each (a write around the pair:
    :class:`~ctxemb_core.errors.OutOfStepError`, ids named, as ``HybridIndex.query`` refuses
    it).

    Each side is read best first and cut to the fusion's ``depth``, as
    ``HybridIndex.query`` does; give the dense retriever ``top_k`` = the depth for the same
    ranking. Each fused document (the dense copy where both sides found it) has the fused score
    and ``meta`` gains ``ctxemb_hybrid`` and each side's rank and score (``ctxemb_dense_rank``,
    ``ctxemb_dense_score``, ``ctxemb_lexical_rank``, ``ctxemb_lexical_score``; ``None`` where that
    side did not find it).

    Args:
        fusion: the fusion the caller states (``None``: the stamp's).
        top_k: documents returned.
    """

    def __init__(self, fusion: Fusion | dict[str, Any] | None = None, top_k: int = 10) -> None:
        self.fusion = recipe(fusion, Fusion, "fusion")
        self.top_k = check_positive_int(top_k, "top_k")

    def to_dict(self) -> dict[str, Any]:
        return default_to_dict(self, fusion=as_dict(self.fusion), top_k=self.top_k)

    @component.output_types(documents=list[Document])
    def run(
        self,
        dense_documents: list[Document],
        lexical_documents: list[Document],
        fingerprint: str,
        hybrid: str,
        top_k: int | None = None,
    ) -> dict[str, list[Document]]:
        """The fused top ``top_k``, best first."""
        n = check_positive_int(top_k, "top_k") if top_k is not None else self.top_k
        who = type(self).__name__
        dense_documents = documents_of(dense_documents, f"{who} (dense_documents)")
        lexical_documents = documents_of(lexical_documents, f"{who} (lexical_documents)")
        contract = recall(hybrid)
        if contract is None:
            raise InvalidInputError(
                f"hybrid {hybrid!r} is no stamp a ContractLexicalRetriever of this process read: "
                "connect its 'hybrid' output to this joiner unchanged"
            )
        if self.fusion is not None:
            check_caller(contract, contract.with_(fusion=self.fusion), where="the hybrid index")
        check_fingerprint(fingerprint, contract.dense)
        for d in dense_documents:
            if isinstance(d.meta.get(FINGERPRINT_KEY), str):
                check_fingerprint(d.meta[FINGERPRINT_KEY], contract.dense)
        for d in lexical_documents:
            found = d.meta.get(HYBRID_KEY)
            if found is None:
                raise MissingStampError(
                    f"lexical document {d.id!r} carries no {HYBRID_KEY}: it was not found by a "
                    "ContractLexicalRetriever"
                )
            if not isinstance(found, str) or not same_contract(contract, found):
                other = recall(found)
                if other is None:
                    raise InvalidInputError(
                        f"lexical document {d.id!r} was found under hybrid contract "
                        f"{str(found)[:12]}, not {contract.fingerprint[:12]}"
                    )
                raise HybridMismatchError(contract, other, where="the lexical documents' index")
        fusion = contract.fusion
        if fusion.method == "weighted" and any(
            d.score is None for d in (*dense_documents, *lexical_documents)
        ):
            raise InvalidInputError("weighted fusion needs every document's score")
        dense = _ranking(dense_documents)
        lexical = _ranking(lexical_documents)
        by_id = {d.id: d for d in reversed(lexical_documents)}
        by_id.update({d.id: d for d in reversed(dense_documents)})
        dense_at = {i: (r, s) for r, (i, s) in enumerate(dense[: fusion.depth], 1)}
        lexical_at = {i: (r, s) for r, (i, s) in enumerate(lexical[: fusion.depth], 1)}
        fused = fuse(fusion, dense, lexical, n)
        # The dense documents were ranked on the texts the dense side stores; a document whose
        # text was rewritten around the index is ranked by the lexical side on its old terms (or
        # not at all), which only the side it was read from can tell. Every candidate is
        # checked, as HybridIndex.query checks them: one not returned still moved the others.
        side = side_of(hybrid)
        if side is not None:
            ranked = dict.fromkeys([*(i for i, _ in fused), *dense_at, *lexical_at])
            side.hybrid().check_found(list(ranked))
        out = []
        for i, score in fused:
            dr, ds = dense_at.get(i, (None, None))
            lr, ls = lexical_at.get(i, (None, None))
            meta = {
                **by_id[i].meta,
                HYBRID_KEY: contract.fingerprint,
                "ctxemb_dense_rank": dr,
                "ctxemb_dense_score": ds,
                "ctxemb_lexical_rank": lr,
                "ctxemb_lexical_score": ls,
            }
            out.append(dataclasses.replace(by_id[i], score=score, meta=meta))
        return {"documents": out}

    run_async = in_thread(run)


def _ranking(documents: list[Document]) -> list[tuple[str, float]]:
    """``(id, score)`` in the order given (best first), each id once."""
    seen: set[str] = set()
    out = []
    for d in documents:
        if d.id not in seen:
            seen.add(d.id)
            out.append((d.id, float(d.score) if d.score is not None else 0.0))
    return out
