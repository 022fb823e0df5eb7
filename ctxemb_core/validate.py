"""Argument checks shared by the public entry points: one rule each, one wording each.

Public: part of the core surface adapters build on ("Adapters and the surface they use" in
docs/architecture.md). An adapter checks the texts and counts its framework hands it with these,
so every adapter refuses the same input in the same words.

What a *text* is, for every call that embeds or caches one: an instance of ``str`` that is valid
Unicode. Python strings may hold surrogate code points (U+D800-U+DFFF: a lone half of a UTF-16
pair, or bytes decoded with ``errors="surrogateescape"``); they are the only code points UTF-8
cannot encode, so no tokenizer can read them. They are refused here, with the argument, the
index and the character position, instead of surfacing as a ``TypeError`` from the tokenizer.
Every other code point (NUL, noncharacters such as U+FFFF, private use) is valid and embedded.

What a *batch* is: a sequence (``list``, ``tuple``, ...) of texts, read once, in order. Refused:

- one string, or ``bytes``: a single value where a batch belongs;
- a one-shot iterator or generator: refusing it leaves it unconsumed (materialising would use up
  the caller's generator even when an item further on is refused), and the results pair with
  the input by index, which needs the input to be indexable. Pass ``list(...)`` instead;
- a mapping, a set: no order, or an order of keys that is rarely what was meant;
- a numpy array: its fixed-width strings have already dropped trailing NULs; pass ``.tolist()``.

A subclass of ``str`` (``numpy.str_``, say) is accepted as the plain string it holds, so no
overridden method of the subclass takes part in prefixing, hashing or tokenizing.

The arguments every store adapter takes are checked here too: flags, counts, ``limit`` /
``offset``, a sample size, ids, what a delete selects, one batch of records
(:mod:`ctxemb_core.guard` still names them, for the adapters that import them from there), and
vectors embedded elsewhere that a caller hands an index or a query (:func:`check_query_vector`,
:func:`check_embedded`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ctxemb_core.errors import InvalidInputError

if TYPE_CHECKING:
    from ctxemb_core.contract import EmbeddingContract

__all__ = [
    "check_count",
    "check_delete",
    "check_embedded",
    "check_flag",
    "check_ids",
    "check_instance",
    "check_json_metadata",
    "check_paging",
    "check_positive_int",
    "check_query_vector",
    "check_records",
    "check_sample_size",
    "check_text",
    "check_texts",
    "texts_from_iterable",
]

# The code points a str may hold and UTF-8 may not: the surrogates.
_SURROGATE = re.compile("[\ud800-\udfff]")


def check_positive_int(
    value: Any,
    name: str,
    *,
    kinds: tuple[type[Any], ...] = (int,),
    error: type[Exception] = InvalidInputError,
) -> int:
    """``value`` if it is an ``int`` above zero (``True`` is not a count), else an error.

    ``kinds`` are the types taken as integers (add ``numpy.integer`` where counts come from
    arrays); ``error`` is the class raised (``InvalidContractError`` for a contract's field).
    """
    if isinstance(value, bool) or not isinstance(value, kinds) or value <= 0:
        raise error(f"{name} must be a positive integer, got {value!r}")
    return value


def check_text(value: Any, name: str) -> str:
    """One text as a plain ``str``, or :class:`InvalidInputError` naming ``name``.

    Args:
        value: the argument as given.
        name: how the caller calls it (``"text"``, ``"word"``, ``"texts[3]"``).
    """
    if not isinstance(value, str):
        raise InvalidInputError(f"{name} must be a string, got {type(value).__name__}")
    text = value if type(value) is str else str.__str__(value)
    _check_encodable(text, name)
    return text


def check_texts(
    value: Any,
    name: str = "texts",
    *,
    single: str = "wrap a single text in a list",
    allow_empty: bool = True,
) -> list[str]:
    """A batch of texts as a new list of plain strings, or :class:`InvalidInputError`.

    Args:
        value: the argument as given.
        name: the argument's name, used in every message (``"texts"``, ``"contexts"``).
        single: the advice given when one string arrives where a batch belongs.
        allow_empty: whether an empty batch is acceptable.

    Raises:
        InvalidInputError: ``value`` is not a batch (see the module docstring), an item is not a
            string or is not valid Unicode (the message gives its index), or the batch is empty
            and ``allow_empty`` is false.
    """
    if isinstance(value, str):
        raise InvalidInputError(f"{name} must be a list of strings, got one string; {single}")
    if isinstance(value, (bytes, bytearray, memoryview)):
        raise InvalidInputError(
            f"{name} must be a list of strings, got {type(value).__name__}; decode the bytes "
            f"(e.g. data.decode('utf-8')) and {single}"
        )
    if not isinstance(value, Sequence):
        raise InvalidInputError(f"{name} must be a list of strings, got {_batch_advice(value)}")
    texts = list(value)
    bad = [i for i, t in enumerate(texts) if not isinstance(t, str)]
    if bad:
        raise InvalidInputError(
            f"{name}[{bad[0]}] is {type(texts[bad[0]]).__name__}, not a string "
            f"({len(bad)} of {len(texts)} items are not strings)"
        )
    for i, text in enumerate(texts):
        if type(text) is not str:
            texts[i] = text = str.__str__(text)
        _check_encodable(text, f"{name}[{i}]")
    if not texts and not allow_empty:
        raise InvalidInputError(f"{name} is empty: there is nothing to embed")
    return texts


def _check_encodable(text: str, name: str) -> None:
    # isascii() is a flag lookup: the common case costs no scan at all.
    if text.isascii():
        return
    found = _SURROGATE.search(text)
    if found is not None:
        count = len(_SURROGATE.findall(text))
        raise InvalidInputError(
            f"{name} is not valid Unicode: it holds {count} surrogate code point(s), the first "
            f"U+{ord(found.group()):04X} at character {found.start()}, which UTF-8 and so no "
            "tokenizer can encode (a split UTF-16 pair, or bytes decoded with "
            "errors='surrogateescape'); decode the source with errors='replace' or remove them"
        )


def _batch_advice(value: Any) -> str:
    kind = type(value).__name__
    if isinstance(value, Iterator):
        return f"{kind}, a one-shot iterator (left unconsumed); pass list(...) of it"
    if isinstance(value, Mapping):
        return f"{kind}; pass list(...) of its values (or keys) explicitly"
    if type(value).__module__ == "numpy":
        return f"numpy {kind}; pass .tolist() of it"
    return kind


def texts_from_iterable(value: Any, name: str = "texts") -> list[str]:
    """Like :func:`check_texts`, for interfaces that take any iterable of texts (LangChain's
    ``add_texts``): a generator is read once into a list; a single string, bytes, ``None`` or a
    non-iterable is refused by :func:`check_texts` before anything is read."""
    if isinstance(value, (str, bytes, bytearray, memoryview, Mapping)) or not isinstance(
        value, Iterable
    ):
        return check_texts(value, name)
    return check_texts(list(value), name)


# -- the arguments every store adapter takes -------------------------------------------------


def check_flag(value: Any, name: str) -> bool:
    """``value`` if it is a bool (a flag that is ``1`` or ``"yes"`` is a mistake, not a yes)."""
    if not isinstance(value, bool):
        raise InvalidInputError(f"{name} must be True or False, got {value!r}")
    return value


def check_instance(value: Any, kind: type, name: str, what: str) -> Any:
    """``value`` if it is a ``kind`` (a store's client, handed to its adapter), else named with
    ``what`` it must be (the type, and where to get one)."""
    if not isinstance(value, kind):
        raise InvalidInputError(f"{name} must be {what}, got {type(value).__name__}")
    return value


def check_count(value: Any, name: str, minimum: int = 1) -> int:
    """``value`` if it is an int of at least ``minimum`` (``True`` is not a count), else named."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise InvalidInputError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return value


def check_paging(arguments: Mapping[str, Any], what: str) -> None:
    """A read's ``limit`` / ``offset`` (when given) as counts >= 0, named with ``what``."""
    for arg in ("limit", "offset"):
        if arguments.get(arg) is not None:
            check_count(arguments[arg], f"{what}: {arg}", 0)


def check_sample_size(sample: Any) -> int:
    """How many stored records to re-embed: an int >= 0 (0 checks the stamp and canary only)."""
    return check_count(sample, "sample", 0)


def check_json_metadata(
    ids: Iterable[str], metadatas: Iterable[Any], stored: str = "as JSON", *, what: str = "record"
) -> None:
    """Each metadata must be JSON (no NaN or infinity, no objects JSON cannot hold): a store that
    keeps metadata as JSON (PostgreSQL's ``jsonb``, a Qdrant payload) would refuse it only in
    the middle of a write. ``stored``: how the store keeps it, ``what``: a record in the
    caller's words (Haystack's ``document``).

    Example:
        >>> check_json_metadata(["d1"], [{"score": 0.5}], "in a Qdrant payload")
    """
    import json

    for i, meta in zip(ids, metadatas, strict=True):
        try:
            json.dumps(meta, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise InvalidInputError(
                f"{what} {i!r}: meta cannot be stored {stored}: {exc}"
            ) from None


def check_ids(ids: Any) -> list[str]:
    """A non-empty list of distinct non-empty string ids, or ``InvalidInputError`` naming them."""
    if isinstance(ids, (str, bytes)) or not isinstance(ids, Sequence):
        raise InvalidInputError(
            f"ids must be a list, got {type(ids).__name__}"
            + ("; wrap a single value in a list" if isinstance(ids, (str, bytes)) else "")
        )
    ids = list(ids)
    if not ids:
        raise InvalidInputError("ids is empty: give at least one id")
    bad = [i for i in ids if not isinstance(i, str) or not i]
    if bad:
        raise InvalidInputError(f"ids must be non-empty strings, got {bad[0]!r}")
    seen: set[str] = set()
    for i in ids:
        if i in seen:
            raise InvalidInputError(f"duplicate id {i!r} in one batch of ids")
        seen.add(i)
    return ids


def check_delete(ids: Any, filters: Mapping[str, Any]) -> tuple[list[str] | None, dict[str, Any]]:
    """What a delete selects: ids and/or non-empty filters (by name). A delete without any, or
    with an empty filter, is refused: it is never read as "everything".

    Returns:
        The checked ids (or ``None``) and the filters that were given, as plain dicts.
    """
    if ids is None and all(v is None for v in filters.values()):
        names = ", ".join(["ids", *filters][:-1]) + f" or {[*filters][-1]}"
        raise InvalidInputError(f"delete needs {names}; none was given")
    checked = check_ids(ids) if ids is not None else None
    for arg, value in filters.items():
        if value is not None and (not isinstance(value, Mapping) or not value):
            raise InvalidInputError(f"{arg} must be a non-empty filter mapping, got {value!r}")
    return checked, {k: dict(v) for k, v in filters.items() if v is not None}


def check_records(
    ids: Sequence[str], documents: Sequence[str], metadatas: Sequence[Any] | None
) -> tuple[list[str], list[Any] | None]:
    """Validate one batch of records before anything is embedded or written.

    Raises:
        InvalidInputError: ``None`` or single strings instead of lists, an empty batch, lengths
            that differ, empty or non-string ids, an id twice in the batch, documents that are
            not strings, metadata entries that are neither a mapping nor ``None``.
    """
    for arg, value in (("ids", ids), ("documents", documents)):
        if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
            raise InvalidInputError(
                f"{arg} must be a list, got {type(value).__name__}"
                + ("; wrap a single value in a list" if isinstance(value, (str, bytes)) else "")
            )
    if metadatas is not None and (
        isinstance(metadatas, (str, bytes, Mapping)) or not isinstance(metadatas, Sequence)
    ):
        raise InvalidInputError(
            f"metadatas must be a list of mappings (or None), got {type(metadatas).__name__}"
        )
    ids = check_ids(ids)
    if len(ids) != len(documents) or (metadatas is not None and len(metadatas) != len(ids)):
        raise InvalidInputError("ids, documents and metadatas must be of the same length")
    for k, d in enumerate(documents):
        if not isinstance(d, str):
            raise InvalidInputError(
                f"documents[{k}] (id {ids[k]!r}) is {type(d).__name__}, not a string"
            )
    if metadatas is not None:
        for k, m in enumerate(metadatas):
            if m is not None and not isinstance(m, Mapping):
                raise InvalidInputError(
                    f"metadatas[{k}] (id {ids[k]!r}) is {type(m).__name__}, not a mapping"
                )
    return ids, list(metadatas) if metadatas is not None else None


# -- vectors embedded elsewhere --------------------------------------------------------------


def check_query_vector(
    vector: Any,
    width: int | None,
    name: str = "query_embedding",
    *,
    contract: EmbeddingContract | None = None,
) -> list[float]:
    """A query vector a caller passes in (embedded elsewhere), checked before a store sees it.

    For a framework whose query embedder and retriever are separate steps: the vector carries no
    contract (the fingerprint beside it does), so what can be checked is its form: present, one
    row of numbers, ``width`` of them (the contract's stored width, ``output_dim``; ``None``:
    not known here), every one finite as float32 (what the stores compute in; a float64 1e300
    counts as infinite). A NaN vector would otherwise return documents scored NaN.

    Args:
        vector: the vector (a list, tuple or 1-D array of numbers).
        width: the number of components required, or ``None``.
        name: the argument's name, for the message.
        contract: the contract the width comes from, described in the message.

    Returns:
        The vector as a list of Python floats, values unchanged.

    Raises:
        InvalidInputError: ``None``, not numbers, not one vector, another width, or a NaN or
            infinite component (the first one is named).
    """
    of = f" ({contract.describe()})" if contract is not None else ""
    if vector is None:
        raise InvalidInputError(
            f"{name} is missing (None): pass the query's vector, embedded under the contract "
            "(e.g. the query embedder's embedding output)"
        )
    try:
        if isinstance(vector, (str, bytes)):
            raise TypeError(type(vector).__name__)
        row = np.asarray(vector, dtype=np.float64)
    except (TypeError, ValueError):
        raise InvalidInputError(
            f"{name} is not a list of numbers (got {type(vector).__name__}); pass the query's "
            "vector, embedded under the contract"
        ) from None
    if row.ndim != 1:
        raise InvalidInputError(
            f"{name} must be one vector, got shape {row.shape}"
            + (f"; the contract's vectors have {width} components{of}" if width else "")
        )
    if width is not None and row.shape[0] != width:
        raise InvalidInputError(
            f"{name} has {row.shape[0]} components, the contract's vectors have {width}{of}; "
            "embed the query under the index's contract"
        )
    with np.errstate(over="ignore", invalid="ignore"):
        finite = np.isfinite(row.astype(np.float32))
    if not finite.all():
        first = int(np.flatnonzero(~finite)[0])
        raise InvalidInputError(
            f"{name} holds NaN or infinite values (component {first}); a query vector must be "
            "finite: re-embed the query"
        )
    values: list[float] = row.tolist()
    return values


def check_embedded(vectors: Any, contract: EmbeddingContract, ids: Sequence[str]) -> np.ndarray:
    """Vectors embedded elsewhere under ``contract``, as the float32 rows a store takes.

    For a framework whose embedder and writer are separate steps: one finite vector per id, of
    the contract's stored width (:func:`storable`: ``output_dim`` components).

    Raises:
        InvalidInputError: a missing vector, one of another width, or a non-finite value (the
            first offending id is named); nothing may be written.
    """
    width = contract.output_dim
    if vectors is None or len(vectors) != len(ids):
        given = "none" if vectors is None else str(len(vectors))
        raise InvalidInputError(f"{len(ids)} records to write and {given} vectors")
    if (
        isinstance(vectors, np.ndarray)
        and vectors.dtype.kind in "fiu"
        and vectors.shape == (len(ids), width)
    ):
        # One array of numbers of the right shape (an embedder's batch): checked whole, as a
        # copy; only one that fails is looked at row by row, to name the record refused.
        block = np.array(vectors, dtype=np.float32, order="C")
        if np.isfinite(block).all():
            return block
    rows = []
    for i, vector in zip(ids, vectors, strict=True):
        if vector is None:
            raise InvalidInputError(f"record {i!r} has no embedding; embed it first")
        try:
            row = np.asarray(vector, dtype=np.float32)
        except (TypeError, ValueError):
            raise InvalidInputError(
                f"record {i!r}: its embedding is not a list of numbers"
            ) from None
        if row.shape != (width,):
            raise InvalidInputError(
                f"record {i!r}: its embedding has shape {row.shape}, the contract stores "
                f"{width} components ({contract.describe()})"
            )
        if not np.isfinite(row).all():
            raise InvalidInputError(f"record {i!r}: its embedding holds NaN or infinity")
        rows.append(row)
    return np.stack(rows) if rows else np.zeros((0, width), dtype=np.float32)
