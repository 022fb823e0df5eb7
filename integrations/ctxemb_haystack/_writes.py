"""What every guarded Haystack store shares on a write: the duplicate policy (also by the name
a writer's ``to_dict`` records) applied to a batch, the error a refused duplicate raises, the
contract a batch's fingerprint names, and the text every stored document must have.

Below the guards (:mod:`._stores` for ``InMemoryDocumentStore``, :mod:`._index` for every store
ctxemb keeps as a driver), so neither imports the other for them.
"""

from __future__ import annotations

from typing import Any

from haystack import Document
from haystack.document_stores.errors import DuplicateDocumentError
from haystack.document_stores.types import DuplicatePolicy

from ctxemb_core import EmbeddingContract
from ctxemb_core.contract import same_contract
from ctxemb_core.documents import batch_fingerprint, recall
from ctxemb_core.errors import ExistingIdsError, InvalidInputError

#: A document as a store writes it: its id, its text and the metadata the store keeps.
Row = tuple[str, str, dict[str, Any]]


class DuplicateDocumentsError(ExistingIdsError, DuplicateDocumentError):
    """Documents with these ids are stored already (policy ``FAIL``); nothing was written."""

    def __init__(self, ids: tuple[str, ...], *, in_batch: bool = False) -> None:
        ExistingIdsError.__init__(self, ids)
        shown = ", ".join(repr(i) for i in self.ids[:5]) + (" …" if len(self.ids) > 5 else "")
        where = "appear more than once in the batch" if in_batch else "already exist in the store"
        self.args = (
            f"documents with ids {shown} {where}; nothing was written. Pass "
            "policy=DuplicatePolicy.OVERWRITE to keep the last or SKIP to keep the first.",
        )


def policy_of(policy: Any) -> DuplicatePolicy:
    """A ``DuplicatePolicy``, or its name as a writer's ``to_dict`` writes it (``"OVERWRITE"``)."""
    if isinstance(policy, DuplicatePolicy):
        return policy
    if isinstance(policy, str) and policy.upper() in DuplicatePolicy.__members__:
        return DuplicatePolicy[policy.upper()]
    raise InvalidInputError(
        f"policy must be a DuplicatePolicy or one of {list(DuplicatePolicy.__members__)}, "
        f"got {policy!r}"
    )


def unique(documents: list[Document], policy: DuplicatePolicy) -> list[Document]:
    """One document per id, as the policy keeps it (``FAIL``: a repeated id is refused)."""
    seen: dict[str, Document] = {}
    for doc in documents:
        if doc.id in seen and policy in (DuplicatePolicy.NONE, DuplicatePolicy.FAIL):
            raise DuplicateDocumentsError((doc.id,), in_batch=True)
        if doc.id not in seen or policy is DuplicatePolicy.OVERWRITE:
            seen[doc.id] = doc
    return list(seen.values())


def batch_of(
    documents: list[Document], policy: DuplicatePolicy
) -> tuple[list[Document], str | None]:
    """One document per id (:func:`unique`) and the contract fingerprint they all carry
    (``None`` for no documents)."""
    documents = unique(documents, policy)
    return documents, batch_fingerprint([d.meta for d in documents], [d.id for d in documents])


def contract_of(fingerprint: str, stamped: EmbeddingContract | None) -> EmbeddingContract:
    """The contract behind a fingerprint: built in this process, or the store's own."""
    contract = recall(fingerprint)
    if contract is None and stamped is not None and same_contract(stamped, fingerprint, exact=True):
        return stamped
    if contract is None:
        raise InvalidInputError(
            f"the documents were embedded under contract {fingerprint[:12]}, which this process "
            "did not build, so their vectors cannot be checked: embed them with a "
            "ContractDocumentEmbedder in this pipeline (building one with that contract is enough)"
        )
    return contract


def content_of(document: Document) -> str:
    if not isinstance(document.content, str):
        raise InvalidInputError(
            f"document {document.id!r} has no text content: a ctxemb store keeps every record's "
            "text, so its vector can be checked against it"
        )
    return document.content
