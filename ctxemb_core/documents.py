"""Document-level stamps, for stores that keep no collection metadata.

A Chroma collection carries the index's stamp in its own metadata (:class:`~ctxemb_core.stamp.
IndexStamp`). Some stores have nowhere to put one: Haystack's and LangChain's in-memory stores
keep documents and nothing about the collection. There each embedded document carries the
fingerprint of the contract that embedded it, under :data:`FINGERPRINT_KEY` in its metadata, and
every result is checked on its way out. An adapter translates its framework's documents into
metadata mappings and calls the two functions here; it decides nothing itself.

The rules:

- On write, :func:`stamp_meta` returns a new metadata dict carrying the caller's fingerprint. A
  metadata that already carries another contract's fingerprint is refused: that document was
  embedded under another contract (it came from another store), and writing it under this
  contract's name would mix recipes. Remove the key first to re-embed it deliberately.
- On read, :func:`check_documents` refuses the whole result if any one document is not the
  caller's: nothing is returned under the wrong contract, not even the documents that are right.
  Checking a sample of the store before a write (any few of its documents) refuses writing under
  one contract into a store written under another.

Only the fingerprint travels with a document, so the differing fields can be named only when the
other contract is known (``known=``: from a stamp, a contract JSON file, a previous version of the
pipeline); otherwise :class:`~ctxemb_core.errors.ContractMismatchError` names both fingerprints.

Example:
    >>> from ctxemb_core import contract_for
    >>> from ctxemb_core.documents import check_documents, stamp_meta
    >>> contract = contract_for("sentence-transformers/all-MiniLM-L6-v2")
    >>> meta = stamp_meta({"title": "Aspirin"}, contract)
    >>> check_documents([meta], contract)  # the caller's own: passes
    >>> check_documents([meta], contract.with_(pooling="cls"), known={
    ...     contract.fingerprint: contract})  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ctxemb_core.errors.ContractMismatchError: contract mismatch: ...
"""

from __future__ import annotations

import hashlib
import itertools
import re
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any

from ctxemb_core.contract import EmbeddingContract, same_contract
from ctxemb_core.errors import (
    ContractMismatchError,
    DamagedStampError,
    InvalidInputError,
    MissingStampError,
)
from ctxemb_core.validate import check_texts

__all__ = [
    "FINGERPRINT_KEY",
    "RERANKER_KEY",
    "STORE_SAMPLE",
    "TEXT_KEY",
    "batch_fingerprint",
    "check_document_widths",
    "check_documents",
    "check_fingerprint",
    "recall",
    "remember",
    "stamp_meta",
    "store_sample",
    "text_digest",
]

#: The metadata key under which an embedded document carries its contract's fingerprint.
FINGERPRINT_KEY = "ctxemb_fingerprint"
#: The metadata key of a reranked document: the fingerprint of the reranker contract its score
#: is under (scores of two reranker contracts are not on one scale).
RERANKER_KEY = "ctxemb_reranker"
#: The metadata key under which a stored record carries :func:`text_digest` of the text its
#: vector was embedded from: re-indexing re-embeds a record only when its text changed.
TEXT_KEY = "ctxemb_text"

# The full sha256 hex digest, as EmbeddingContract.fingerprint writes it; anything else is damage.
_FINGERPRINT = re.compile(r"[0-9a-f]{64}")

#: Stored documents that stand for a store without collection metadata (every write into it is
#: checked, so any few are its contract's; the first and the last written are taken).
STORE_SAMPLE = 16


def store_sample(records: Any) -> list[Any]:
    """The first and last :data:`STORE_SAMPLE` // 2 of a store's records (all if it holds no
    more), from a sized, reversible collection such as a dict's ``values()``."""
    if len(records) <= STORE_SAMPLE:
        return list(records)
    half = STORE_SAMPLE // 2
    return list(itertools.islice(records, half)) + list(itertools.islice(reversed(records), half))


# Contracts this process embedded with, by fingerprint: a document or a query carries only a
# fingerprint, and a check in the same process can still name the fields that differ.
_SEEN: OrderedDict[str, EmbeddingContract] = OrderedDict()
_SEEN_LOCK = threading.Lock()
_SEEN_MAX = 256


def remember(contract: EmbeddingContract) -> None:
    """Record ``contract`` for this process, so a fingerprint of it can be named in full.

    :func:`stamp_meta` and the framework adapters' embedders call this; a mismatch found
    later from a fingerprint alone then names the differing fields (the last 256 contracts are
    kept).
    """
    _check_contract(contract)
    with _SEEN_LOCK:
        _SEEN[contract.fingerprint] = contract
        _SEEN.move_to_end(contract.fingerprint)
        while len(_SEEN) > _SEEN_MAX:
            _SEEN.popitem(last=False)


def recall(fingerprint: str) -> EmbeddingContract | None:
    """The contract with this fingerprint if this process embedded with it, else ``None``."""
    with _SEEN_LOCK:
        return _SEEN.get(fingerprint)


def check_fingerprint(fingerprint: str, index: EmbeddingContract) -> EmbeddingContract:
    """Refuse a query embedded under another contract than the index's; returns the caller's.

    For frameworks whose query embedder hands its retriever a vector and the fingerprint it was
    made under. The differing fields are named when the caller's contract was built in this
    process (:func:`remember`), else both fingerprints are.

    Raises:
        ContractMismatchError: ``fingerprint`` is not the index's.
        DamagedStampError: ``fingerprint`` is not a contract fingerprint.
        InvalidInputError: ``index`` is not a contract.
    """
    _check_contract(index)
    if not isinstance(fingerprint, str) or not _FINGERPRINT.fullmatch(fingerprint):
        raise DamagedStampError(
            f"the query's fingerprint {fingerprint!r} is not a contract fingerprint (64 lowercase "
            "hex digits); connect the query embedder's 'fingerprint' output unchanged"
        )
    if same_contract(index, fingerprint):
        return index
    caller = recall(fingerprint)
    if caller is None:
        raise ContractMismatchError.from_fingerprints(index, fingerprint)
    if same_contract(index, caller):
        return caller
    raise ContractMismatchError(index, caller)


def batch_fingerprint(
    metas: Sequence[Mapping[str, Any]], ids: Sequence[str] | None = None
) -> str | None:
    """The one fingerprint every document of a batch to be written carries (``None`` if empty).

    Args:
        metas: each document's metadata, in batch order.
        ids: the documents' ids, to name them in errors (else their positions).

    Raises:
        MissingStampError: a document carries none (it was not embedded through ctxemb).
        DamagedStampError: a document carries a value that is not a fingerprint.
        ContractMismatchError: the batch mixes contracts (fields named when both were built in
            this process); nothing may be written.
    """
    first: str | None = None
    for i, meta in enumerate(metas):
        _check_meta(meta, f"metas[{i}]")
        name = _name(ids, i)
        carried = _carried(meta, f"document {name!r}")
        if carried is None:
            raise MissingStampError(
                f"document {name!r} carries no {FINGERPRINT_KEY!r} in its metadata: only "
                "documents embedded by a ctxemb embedder may be written into a ctxemb store "
                "(nothing was written)"
            )
        if first is None or same_contract(first, carried):
            first = first or carried
            continue
        # The one rule, on the contracts where this process knows them: a document embedded
        # under a label-only twin of the batch's contract (a copied folder under its own name)
        # belongs to the same batch.
        ours, theirs = recall(first), recall(carried)
        if ours is not None and theirs is not None:
            if same_contract(ours, theirs):
                continue
            raise ContractMismatchError(ours, theirs, documents=[name])
        raise ContractMismatchError.from_fingerprints(
            ours or first, theirs or carried, documents=[name]
        )
    return first


def _name(ids: Sequence[str] | None, i: int) -> str | int:
    return ids[i] if ids is not None and i < len(ids) else i


def text_digest(text: str) -> str:
    """The sha256 hex digest of ``text`` (UTF-8): what :data:`TEXT_KEY` holds.

    It covers the exact text handed to the embedder (a title joined in included), not the
    contract's document prefix: the prefix is part of the contract, which the index's stamp or
    the record's fingerprint covers already, so a changed prefix is refused, not "updated".

    Example:
        >>> text_digest("Green tea is steamed.")[:12]
        '97d8c47457ae'
    """
    if not isinstance(text, str):
        raise InvalidInputError(f"a text digest is of a string, got {type(text).__name__}")
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def stamp_meta(
    meta: Mapping[str, Any], contract: EmbeddingContract, *, text: str | None = None
) -> dict[str, Any]:
    """A new metadata dict: ``meta`` plus the contract's fingerprint under :data:`FINGERPRINT_KEY`.

    The copy is shallow and ``meta`` itself is never changed. Stamping a metadata that already
    carries the same contract's fingerprint (:func:`~ctxemb_core.contract.same_contract`: a
    label-only difference is the same contract) sets ``contract``'s; a ``None`` under the key
    (stores that fill absent fields with ``None``) counts as no stamp.

    Args:
        meta: the document's metadata as the framework holds it.
        contract: the contract the document's vector was made under.
        text: the text the vector is embedded from; its :func:`text_digest` is set under
            :data:`TEXT_KEY` (replacing one ``meta`` carried from an earlier text).

    Returns:
        A new ``dict`` with every item of ``meta`` and the fingerprint (and the text digest).

    Raises:
        InvalidInputError: ``meta`` is not a mapping or ``contract`` is not a contract.
        ContractMismatchError: ``meta`` already carries another contract's fingerprint (the
            document was embedded under it; a fingerprint this process does not know is
            another); nothing is stamped.
        DamagedStampError: ``meta`` carries a value under the key that is not a fingerprint.

    Example:
        >>> stamp_meta({"title": "Aspirin"}, contract)  # doctest: +SKIP
        {'title': 'Aspirin', 'ctxemb_fingerprint': '3f1c…'}
    """
    _check_contract(contract)
    _check_meta(meta, "meta")
    carried = _carried(meta, "meta")
    known = recall(carried) if carried is not None else None
    if carried is not None and not same_contract(known or carried, contract):
        if known is not None:
            raise ContractMismatchError(known, contract)
        raise ContractMismatchError.from_fingerprints(carried, contract)
    remember(contract)
    stamped = {**meta, FINGERPRINT_KEY: contract.fingerprint}
    if text is not None:
        stamped[TEXT_KEY] = text_digest(text)
    return stamped


def check_documents(
    metas: Sequence[Mapping[str, Any]],
    contract: EmbeddingContract | str,
    *,
    ids: Sequence[str] | None = None,
    known: Mapping[str, EmbeddingContract] | None = None,
    rewrite: str = "",
) -> None:
    """Refuse a retrieved result unless every document was embedded under ``contract``
    (``rewrite``: how the caller's framework deletes and writes documents again, for the
    advice on documents written around ctxemb; none: ctxemb's embedder and writer).

    One document that is not the caller's refuses the whole result. When several problems are
    present, the most specific is raised: another contract's fingerprint first, then an
    unreadable one, then a missing one. An empty result passes.

    Args:
        metas: the metadata of each retrieved document, in result order.
        contract: the caller's contract (``embedder.contract`` for an Embedder), or its
            fingerprint (a query embedder's output); fields are named only when both contracts
            were built in this process or given in ``known``.
        ids: the documents' ids, parallel to ``metas``; errors name documents by id when given,
            else by position in ``metas``.
        known: contracts by fingerprint (a stamp's contract, a contract JSON file's), used to
            name the differing fields when a document carries one of their fingerprints. Each
            key must be its contract's fingerprint.

    Raises:
        ContractMismatchError: a document carries another contract's fingerprint; its fields are
            named if that contract is in ``known``, else both fingerprints are. When several
            foreign fingerprints are present, a known one is reported first, then the first seen.
        DamagedStampError: a document carries a value under :data:`FINGERPRINT_KEY` that is not a
            fingerprint.
        MissingStampError: a document carries no fingerprint: it was written around ctxemb.
        InvalidInputError: ``metas``, ``ids``, ``known`` or ``contract`` is not what is described
            above (the message names the argument and the position).

    Example:
        >>> hits = store.search(query_vector)  # doctest: +SKIP
        >>> metas, ids = [h.meta for h in hits], [h.id for h in hits]  # doctest: +SKIP
        >>> check_documents(metas, contract, ids=ids)  # doctest: +SKIP
    """
    if isinstance(contract, str):
        if not _FINGERPRINT.fullmatch(contract):
            raise InvalidInputError(
                f"contract must be an EmbeddingContract or its fingerprint, got {contract!r}"
            )
        contract = recall(contract) or contract
    else:
        _check_contract(contract)
    if isinstance(metas, (str, bytes, Mapping)) or not isinstance(metas, Sequence):
        advice = "; wrap a single metadata in a list" if isinstance(metas, Mapping) else ""
        raise InvalidInputError(
            f"metas must be a list of metadata mappings, got {type(metas).__name__}{advice}"
        )
    metas = list(metas)
    for i, meta in enumerate(metas):
        _check_meta(meta, f"metas[{i}]")
    names: list[str | int] = list(range(len(metas)))
    if ids is not None:
        names = list(check_texts(ids, "ids", single="wrap a single id in a list"))
        if len(names) != len(metas):
            raise InvalidInputError(
                f"ids has {len(names)} items and metas {len(metas)}; give one id per document"
            )
    contracts = {**_seen(), **_check_known(known)}

    foreign: dict[str, list[str | int]] = {}
    damaged: list[str | int] = []
    missing: list[str | int] = []
    for name, meta in zip(names, metas, strict=True):
        try:
            carried = _carried(meta, "")
        except DamagedStampError:
            damaged.append(name)
            continue
        if carried is None:
            missing.append(name)
        elif not same_contract(contracts.get(carried, carried), contract):
            foreign.setdefault(carried, []).append(name)

    if foreign:
        # A known contract names fields; dicts keep insertion order, so "first seen" otherwise.
        fingerprint = next((f for f in foreign if f in contracts), next(iter(foreign)))
        documents = foreign[fingerprint]
        index = contracts.get(fingerprint)
        if index is not None and not isinstance(contract, str):
            raise ContractMismatchError(index, contract, documents=documents)
        raise ContractMismatchError.from_fingerprints(
            index or fingerprint, contract, documents=documents
        )
    if damaged:
        raise DamagedStampError(
            f"{_count(damaged, metas)} carry a value under {FINGERPRINT_KEY!r} that is not a "
            f"contract fingerprint ({_shown(damaged)}); the whole result was refused. Something "
            "rewrote their metadata around ctxemb: re-embed those documents through ctxemb."
        )
    if missing:
        raise MissingStampError(
            f"{_count(missing, metas)} carry no {FINGERPRINT_KEY!r} in their metadata "
            f"({_shown(missing)}): they were written around ctxemb, so nothing proves which "
            "contract embedded them, and the whole result was refused. Delete every stored "
            "document without it, then write them again through ctxemb's embedder and writer "
            f"(which stamp each one){': ' + rewrite if rewrite else ''}. Or rebuild the store."
        )


def check_document_widths(
    vectors: Sequence[Any], contract: EmbeddingContract, *, ids: Sequence[str]
) -> None:
    """Refuse stored documents whose vector is not of the contract's stored width.

    For a store that keeps each document's vector beside its fingerprint (LangChain's and
    Haystack's in-memory stores): a document that passed :func:`check_documents` carries the
    contract's fingerprint, so a vector of another width means the fingerprint was copied onto
    it around ctxemb. Checked before a search, whose own failure (numpy's, inside the store)
    would name no document. ``None`` is a vector the store does not hold: not checked.

    Args:
        vectors: each document's stored vector, in ``ids`` order.
        contract: the contract the documents claim (``output_dim`` components each).
        ids: the documents' ids, named in the error.

    Raises:
        DamagedStampError: a vector of another width (the first documents are named).
        InvalidInputError: ``vectors`` and ``ids`` differ in length.
    """
    if len(vectors) != len(ids):
        raise InvalidInputError(f"{len(vectors)} vectors for {len(ids)} ids")
    width = contract.output_dim
    bad: list[tuple[str, Any]] = []
    for i, vector in zip(ids, vectors, strict=True):
        if vector is None:
            continue
        try:
            size: Any = len(vector)
        except TypeError:
            size = type(vector).__name__
        if size != width:
            bad.append((i, size))
    if bad:
        first, size = bad[0]
        raise DamagedStampError(
            f"{len(bad)} of {len(ids)} stored documents carry this contract's fingerprint but "
            f"a vector of another width: {first!r} has {size} components, the contract's "
            f"vectors have {width} ({contract.describe()}; {_shown([i for i, _ in bad])}). "
            "Their fingerprint was copied onto them around ctxemb: delete them from the store, "
            "or re-embed them through ctxemb."
        )


def _seen() -> dict[str, EmbeddingContract]:
    with _SEEN_LOCK:
        return dict(_SEEN)


def _check_contract(contract: Any) -> None:
    if not isinstance(contract, EmbeddingContract):
        advice = "; pass embedder.contract" if hasattr(contract, "contract") else ""
        raise InvalidInputError(
            f"contract must be an EmbeddingContract, got {type(contract).__name__}{advice}"
        )


def _check_meta(meta: Any, name: str) -> None:
    if not isinstance(meta, Mapping):
        raise InvalidInputError(
            f"{name} must be a metadata mapping (a dict), got {type(meta).__name__}"
        )


def _check_known(known: Any) -> Mapping[str, EmbeddingContract]:
    if known is None:
        return {}
    if not isinstance(known, Mapping):
        raise InvalidInputError(
            "known must be a mapping of fingerprint to EmbeddingContract, got "
            f"{type(known).__name__}; e.g. {{c.fingerprint: c for c in contracts}}"
        )
    for key, value in known.items():
        if not isinstance(value, EmbeddingContract):
            raise InvalidInputError(
                f"known[{key!r}] must be an EmbeddingContract, got {type(value).__name__}"
            )
        # A key that is not its contract's fingerprint would name the fields of another recipe.
        if not same_contract(value, key, exact=True):
            raise InvalidInputError(
                f"known[{key!r}] holds the contract {value.fingerprint[:12]}, not the one its "
                "key names; key each contract by its own fingerprint"
            )
    return known


def _carried(meta: Mapping[str, Any], name: str) -> str | None:
    """The fingerprint a metadata carries, ``None`` if none, or ``DamagedStampError``."""
    value = meta.get(FINGERPRINT_KEY)
    if value is None:
        return None
    if not isinstance(value, str) or not _FINGERPRINT.fullmatch(value):
        raise DamagedStampError(
            f"{name} carries {value!r} under {FINGERPRINT_KEY!r}, which is not a contract "
            "fingerprint (64 lowercase hex digits); something rewrote it around ctxemb. Remove "
            "the key to re-embed the document deliberately."
        )
    return value


def _count(names: list[str | int], metas: list[Any]) -> str:
    return f"{len(names)} of {len(metas)} retrieved documents"


def _shown(names: list[str | int]) -> str:
    which = "ids" if isinstance(names[0], str) else "positions"
    return f"{which} " + ", ".join(repr(n) for n in names[:5]) + (" …" if len(names) > 5 else "")
