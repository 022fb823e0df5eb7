"""Store-agnostic guard logic: what an adapter asks of an index before it writes or returns.

An adapter reads its store's metadata and stored (id, document, vector) records and hands them
here; every decision — stamped or not, which fields differ, whether the store's own embedding
setting agrees with the stamp, whether the vectors in the store are this contract's vectors — is
made once, in this module.

What the guard proves, and what it samples:

- The stamp (fingerprint, contract, canary) is read strictly and checked completely on open and
  whenever an adapter sees it change (:meth:`IndexStamp.from_metadata`, :meth:`IndexStamp.verify`).
- Stored records are re-embedded and compared with :func:`~ctxemb_core.stamp.agreement` (angle
  *and* length). On open only a sample is checked: the newest records (where writes around ctxemb
  land) and a uniform random draw among the older ones; :func:`detection_probability` says how
  likely that sample is to include a given number of altered older records. ``verify`` can check
  every record. A record with a vector but no text cannot be re-embedded; ctxemb never writes
  one, so it counts as foreign.
"""

from __future__ import annotations

import contextlib
import functools
import math
import random
import signal
import threading
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ctxemb_core._batches import progress_bar
from ctxemb_core.contract import (
    ContractDiff,
    DiffKind,
    EmbeddingContract,
    FieldChange,
    Precision,
    Role,
    same_contract,
)
from ctxemb_core.embedder import Embedder
from ctxemb_core.errors import (
    ConfigurationMismatchError,
    ContractMismatchError,
    EncoderDriftError,
    ExistingIdsError,
    ForeignVectorsError,
    IncompleteWriteError,
    InvalidInputError,
    MissingStampError,
    StampError,
    StorageMismatchError,
)
from ctxemb_core.pooling import quantize
from ctxemb_core.stamp import CANARY_TOLERANCE, IndexStamp, agreement

# The argument checks live in ctxemb_core.validate; named here too, where adapters found them.
from ctxemb_core.validate import (
    check_count,
    check_delete,
    check_flag,
    check_ids,
    check_paging,
    check_records,
    check_sample_size,
)

__all__ = [
    "OPEN_SAMPLE",
    "RESTAMPABLE",
    "RecordCheck",
    "RestampReport",
    "VerifyReport",
    "add_missing",
    "adopt_stamp",
    "as_embedder",
    "check_binding",
    "check_configuration",
    "check_count",
    "check_delete",
    "check_embedded",
    "check_flag",
    "check_ids",
    "check_paging",
    "check_querier",
    "check_querier_canary",
    "check_records",
    "check_sample_size",
    "check_storage",
    "check_stored",
    "deferred_interrupts",
    "detection_probability",
    "open_stamp",
    "record_tolerance",
    "records_progress",
    "refuse_foreign",
    "refuse_vectorless",
    "restamp_stamp",
    "sample_cosines",
    "sample_ranges",
    "similarity",
    "storable",
    "stored_form",
    "undoable_write",
    "verify_index",
]

#: Stored records re-embedded on open by default: the newest half and a random half.
OPEN_SAMPLE = 16

#: Why a stored record is not this contract's.
NO_TEXT = "no text to re-embed"
OTHER_WIDTH = "another width"
OTHER_VECTOR = "another vector"


@dataclass(frozen=True)
class RecordCheck:
    """Stored records re-embedded and compared with their stored vectors.

    Attributes:
        checked: how many records were looked at.
        min_agreement: the lowest :func:`~ctxemb_core.stamp.agreement` among the records that
            could be re-embedded (``None`` when there were none).
        bad: ``{id: reason}`` of the records whose stored vector is not this contract's.
    """

    checked: int = 0
    min_agreement: float | None = None
    bad: dict[str, str] = field(default_factory=dict)

    def merge(self, other: RecordCheck) -> RecordCheck:
        lows = [x for x in (self.min_agreement, other.min_agreement) if x is not None]
        return RecordCheck(
            self.checked + other.checked, min(lows) if lows else None, {**self.bad, **other.bad}
        )


@dataclass(frozen=True)
class VerifyReport:
    """What :func:`verify_index` found; ``ok`` only when every check passed.

    Attributes:
        stamped: the index carries a ctxemb stamp.
        fingerprint_match: the stamp's fingerprint equals the caller's, or the two differ only
            in the model's name over equal weights digests (a ``label`` difference, listed in
            ``diff``: the same vectors, accepted on open as well).
        diff: the contract difference (empty when the fingerprints match or there is no stamp).
        canary_cosine: lowest agreement between the stored canary and its re-embedding (or
            ``None`` when it was not computed because the contracts differ).
        sample_size: how many stored records were re-embedded and compared.
        sample_min_cosine: the lowest agreement among them (``None`` without a sample).
        bad_ids: ids of checked records whose stored vector is not this contract's.
        tolerance: the agreement both checks require (for float vectors).
        damaged: why the stamp could not be read, when it is there but damaged.
        records: how many records the index holds (``None`` when unknown).
        mode: ``"all"``, ``"sample"`` or ``"none"``: how the records were chosen.
        configuration: the store's own embedding setting checked against the stamp: ``"match"``,
            a description of the disagreement, or ``None`` when the store has no such setting.
        reasons: ``{id: reason}`` for each bad id.
    """

    stamped: bool
    fingerprint_match: bool
    diff: ContractDiff | None
    canary_cosine: float | None
    sample_size: int
    sample_min_cosine: float | None
    bad_ids: tuple[str, ...] = field(default=())
    tolerance: float = CANARY_TOLERANCE
    damaged: str | None = None
    records: int | None = None
    mode: str = "none"
    configuration: str | None = None
    reasons: dict[str, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        canary_ok = self.canary_cosine is not None and self.canary_cosine >= self.tolerance
        configuration_ok = self.configuration in (None, "match")
        return (
            self.stamped
            and self.damaged is None
            and self.fingerprint_match
            and canary_ok
            and configuration_ok
            and not self.bad_ids
        )

    @property
    def detection_probability(self) -> float:
        """The chance that this check found one altered record among the older ones."""
        if self.mode == "all":
            return 1.0
        if self.records is None or self.mode == "none":
            return 0.0
        return detection_probability(self.records, self.sample_size)

    def checked(self) -> list[str]:
        """What this report checked, in words."""
        if not self.stamped:
            done = ["stamp: looked for, none found"]
        elif self.damaged is not None:
            done = ["stamp: read, and found damaged"]
        else:
            done = ["stamp: present and readable"]
        if self.stamped and self.damaged is None:
            done.append("fingerprint: the caller's contract against the stamp's")
            if self.canary_cosine is not None:
                done.append("canary: the probe texts re-embedded, angle and length")
        if self.configuration is not None:
            done.append("configuration: the store's embedding setting against the stamp")
        if self.mode == "all":
            done.append(f"records: all {self.sample_size} re-embedded, angle and length")
        elif self.mode == "sample":
            done.append(
                f"records: a sample of {self.sample_size} of {self.records} (the newest half "
                "and a random half) re-embedded, angle and length"
            )
        return done

    def not_checked(self) -> list[str]:
        """What this report could not check, in words."""
        out = []
        if not self.stamped or self.damaged is not None:
            out.append("fingerprint and canary: no readable stamp to check them against")
        elif not self.fingerprint_match:
            out.append("canary: not re-embedded, the contracts differ")
        if self.mode == "sample" and self.records and self.sample_size < self.records:
            p = self.detection_probability
            out.append(
                f"records: {self.records - self.sample_size} of {self.records} were not "
                f"re-embedded; one altered older record is found with probability {p:.3f} "
                "(check every record with all=True / --all)"
            )
        elif self.mode == "none":
            out.append("records: no stored record was re-embedded")
        out.append("record metadata: not part of the contract, never checked")
        out.append("records written after this check: checked by the next one")
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "stamped": self.stamped,
            "damaged": self.damaged,
            "fingerprint_match": self.fingerprint_match,
            "diff": [str(c) for c in self.diff.changes] if self.diff else [],
            "diff_kind": self.diff.kind.value if self.diff else DiffKind.IDENTICAL.value,
            "canary_cosine": self.canary_cosine,
            "configuration": self.configuration,
            "records": self.records,
            "mode": self.mode,
            "sample_size": self.sample_size,
            "sample_min_cosine": self.sample_min_cosine,
            "detection_probability": round(self.detection_probability, 6),
            "bad_ids": list(self.bad_ids),
            "reasons": dict(self.reasons),
            "tolerance": self.tolerance,
            "checked": self.checked(),
            "not_checked": self.not_checked(),
        }


# -- arguments every adapter takes --------------------------------------------------------------


def as_embedder(contract: Any, what: str = "contract") -> Embedder:
    """The caller's embedder: an :class:`Embedder` as it is, a contract made into one."""
    if isinstance(contract, Embedder):
        return contract
    if isinstance(contract, EmbeddingContract):
        return Embedder(contract)
    raise InvalidInputError(
        f"{what} must be an EmbeddingContract or an Embedder, got {type(contract).__name__}"
    )


def check_querier(embedder: Any) -> Embedder | None:
    """A caller's own query embedder: an :class:`Embedder` or ``None`` (a contract is refused:
    the caller meant a specific embedder, and building one silently would hide that)."""
    if embedder is not None and not isinstance(embedder, Embedder):
        hint = "; pass Embedder(contract)" if isinstance(embedder, EmbeddingContract) else ""
        raise InvalidInputError(
            f"embedder must be an Embedder, got {type(embedder).__name__}{hint}"
        )
    return embedder


# -- the stored form of a contract's vectors --------------------------------------------------


def check_querier_canary(stamp: IndexStamp, querier: Embedder, verified: list[Embedder]) -> None:
    """Refuse a querier of another contract than the stamp's; re-embed the canary with each
    embedder not in ``verified`` once (same contract on paper, the canary proves its vectors)."""
    stamp.check_contract(querier.contract)
    if not any(q is querier for q in verified):
        stamp.verify(querier)
        verified.append(querier)


def storable(vectors: np.ndarray, precision: Precision) -> np.ndarray:
    """A contract's output vectors as float32 rows any vector store accepts and searches right.

    ``int8`` vectors keep their integer values (cosine and inner product rank as on the
    integers); ``binary`` vectors are unpacked to ±1 (cosine is then ``1 - 2·hamming/dim``, so
    ranks are Hamming ranks).
    """
    array = np.asarray(vectors)
    if precision is Precision.BINARY:
        return np.unpackbits(array.astype(np.uint8), axis=-1).astype(np.float32) * 2.0 - 1.0
    return array.astype(np.float32)


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


def stored_form(
    embedder: Embedder, texts: Sequence[str], role: Role | str, *, warn: bool = True
) -> np.ndarray:
    """The vectors a store holds for ``texts`` under the embedder's contract (float32 rows).

    ``warn=False``: no :class:`~ctxemb_core.errors.TruncationWarning` for the texts cut (see
    :meth:`Embedder.embed_float`).
    """
    role = Role.parse(role, "role")
    precision = embedder.contract.precision
    floats = embedder.embed_float(list(texts), role, warn=warn)
    return storable(quantize(floats, precision), precision)


def record_tolerance(contract: EmbeddingContract, tolerance: float = CANARY_TOLERANCE) -> float:
    """The agreement a stored record must reach to count as this contract's.

    Float vectors reproduce to a few parts in a million, so ``tolerance`` applies. A binary
    vector's sign bits can flip where a component is within rounding of zero: up to 1 % of them
    may differ (two unrelated vectors differ in about half).
    """
    if contract.precision is Precision.BINARY:
        return min(
            tolerance, 1.0 - 2.0 * max(1.0, 0.01 * contract.output_dim) / contract.output_dim
        )
    return tolerance


def similarity(distances: Any, space: str, contract: EmbeddingContract) -> np.ndarray:
    """A store's distances as the contract's similarity: higher is better, one meaning per contract.

    Stores report what their index computes: Chroma gives a distance (``cosine``: 1 - cos,
    ``ip``: 1 - dot, ``l2``: the squared Euclidean distance), lower is better. Under a
    normalised contract every space becomes the cosine similarity (on unit vectors
    ``|a - b|² = 2 - 2 cos``); otherwise ``cosine`` gives the cosine, ``ip`` the inner product
    and ``l2`` the negated squared distance.

    Raises:
        InvalidInputError: a space other than ``cosine``, ``ip`` or ``l2``.

    Example:
        >>> similarity([0.2, 0.5], "cosine", contract)  # doctest: +SKIP
        array([0.8, 0.5])
    """
    values = np.asarray(distances, dtype=np.float64)
    if space in ("cosine", "ip"):
        return 1.0 - values
    if space == "l2":
        return 1.0 - values / 2.0 if contract.normalize else -values
    raise InvalidInputError(f"unknown distance space {space!r}; expected cosine, ip or l2")


# -- stored records ---------------------------------------------------------------------------


def sample_cosines(embedder: Embedder, documents: Sequence[str | None], vectors: Any) -> np.ndarray:
    """Agreement between each stored vector and its document re-embedded under the contract.

    A record stored without its text cannot be checked and gets ``nan``; a stored vector of
    another width gets ``-1``.
    """
    if len(documents) != len(vectors):
        raise InvalidInputError("documents and vectors must be of the same length")
    out = np.full(len(documents), np.nan)
    keep = [i for i, d in enumerate(documents) if _readable(d)]
    if not keep:
        return out
    width = embedder.contract.output_dim
    rows = [np.asarray(vectors[i], dtype=np.float32).ravel() for i in keep]
    fits = [k for k, r in zip(keep, rows, strict=True) if r.shape == (width,)]
    out[[k for k in keep if k not in set(fits)]] = -1.0  # another width is another encoder
    if not fits:
        return out
    stored = np.stack([np.asarray(vectors[i], dtype=np.float32).ravel() for i in fits])
    # Stored documents re-embedded to verify them are not the caller's texts: their truncation
    # is the index's business (it was cut the same way when written), not news about the input.
    texts = [documents[i] for i in fits]
    fresh = stored_form(embedder, texts, Role.DOCUMENT, warn=False)  # type: ignore[arg-type]
    out[fits] = agreement(stored, fresh)
    return out


def _readable(document: Any) -> bool:
    # A text no tokenizer can encode (lone surrogates) was not written by ctxemb either.
    if not isinstance(document, str):
        return False
    try:
        document.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def check_stored(
    embedder: Embedder,
    ids: Sequence[str],
    documents: Sequence[str | None],
    vectors: Any,
    tolerance: float = CANARY_TOLERANCE,
) -> RecordCheck:
    """Re-embed stored records and name each one whose stored vector is not this contract's."""
    if not len(ids):
        return RecordCheck()
    scores = sample_cosines(embedder, documents, vectors)
    need = record_tolerance(embedder.contract, tolerance)
    bad: dict[str, str] = {}
    for i, d, score in zip(ids, documents, scores, strict=True):
        if not _readable(d):
            bad[i] = NO_TEXT
        elif score == -1.0:
            bad[i] = OTHER_WIDTH
        elif not score >= need:
            bad[i] = OTHER_VECTOR
    checked = scores[~np.isnan(scores)]
    return RecordCheck(len(ids), float(checked.min()) if checked.size else None, bad)


def refuse_foreign(
    embedder: Embedder,
    ids: Sequence[str],
    documents: Sequence[str | None],
    vectors: Any,
    tolerance: float = CANARY_TOLERANCE,
) -> RecordCheck:
    """:func:`check_stored`, raising :class:`ForeignVectorsError` for any record it names (what
    an open does with its sample once the stamp and canary passed)."""
    result = check_stored(embedder, ids, documents, vectors, tolerance)
    _raise_foreign(result)
    return result


def refuse_vectorless(ids: Sequence[str], seen: int) -> None:
    """Records a search met without a stored vector are foreign, as :func:`check_stored` names
    them on open (another width, agreement -1): refused with its advice, never ranked or
    crashed on (``seen``: how many records the search returned).

    Raises:
        ForeignVectorsError: naming ``ids``, when there are any.
    """
    if ids:
        raise ForeignVectorsError(tuple(ids), seen, -1.0)


def _raise_foreign(result: RecordCheck) -> None:
    if result.bad:
        low = result.min_agreement if result.min_agreement is not None else float("nan")
        untexted = sum(r == NO_TEXT for r in result.bad.values())
        raise ForeignVectorsError(tuple(result.bad), result.checked, low, untexted)


def detection_probability(count: int, sample: int, altered: int = 1) -> float:
    """The chance that an open-time sample includes at least one of ``altered`` older records.

    The sample is the newest ``sample // 2`` records (a write around ctxemb that appends is
    always seen) plus ``sample - sample // 2`` drawn uniformly from the older ones; this is the
    hypergeometric chance for records altered in place (an upsert keeps a record's position).
    """
    newest = min(count, max(1, sample // 2)) if sample > 0 and count > 0 else 0
    older = count - newest
    draw = min(older, max(0, sample - newest))
    altered = min(altered, older)
    if older <= 0 or altered <= 0:
        return 1.0 if altered > 0 else 0.0
    if draw >= older:
        return 1.0
    missed = math.comb(older - altered, draw) / math.comb(older, draw)
    return 1.0 - missed


# -- the stamp and the store's own setting ----------------------------------------------------


def check_storage(
    name: str,
    stored: Mapping[str, Any],
    expected: Mapping[str, Any],
    recorded: Mapping[str, Any] | None = None,
    advice: str = "",
) -> None:
    """The form a store keeps the vectors in must be the one the stamp's contract makes.

    For stores whose vectors have a declared type (a PostgreSQL column): the adapter says what
    the contract's vectors need (``expected``, e.g. ``{"column": "vector(384)"}``), what the
    store has now (``stored``) and what was recorded beside the stamp when the index was made
    (``recorded``, if the store keeps it). All three must agree.

    Raises:
        StorageMismatchError: a field differs (each one named, store against stamp).
    """
    for found in (stored, recorded):
        if found is None:
            continue
        if any(found.get(k) != v for k, v in expected.items()):
            raise StorageMismatchError(name, dict(found), dict(expected), advice)


def check_configuration(
    stamp: IndexStamp, name: str | None, contract: Mapping[str, Any] | None
) -> None:
    """The store's persisted embedding setting must be the stamp's contract.

    Args:
        stamp: the index's stamp (already read and verified).
        name: the name of the embedding function the store persisted (``None`` for none).
        contract: the contract dict in that setting, for a ctxemb function.

    Raises:
        ConfigurationMismatchError: another function, or a ctxemb function under another
            contract (the differing fields named).
    """
    if name != "ctxemb":
        what = f"embedding function {name!r}" if name else "no embedding function"
        raise ConfigurationMismatchError(
            str(name), (), f"the store records {what}, the stamp says ctxemb {stamp.fingerprint}"
        )
    try:
        configured = EmbeddingContract.from_dict(dict(contract or {}))
    except (StampError, ValueError, TypeError) as exc:
        raise ConfigurationMismatchError(
            "ctxemb", (), f"the ctxemb configuration holds no valid contract ({exc})"
        ) from None
    if not same_contract(stamp.contract, configured, exact=True):
        diff = stamp.contract.diff(configured)
        raise ConfigurationMismatchError("ctxemb", diff.fields, f"it differs in {diff}")


@functools.lru_cache(maxsize=32)
def _read_stamp(items: tuple[tuple[str, str, Any], ...]) -> IndexStamp:
    # A store's hook asks on every call (0.35 ms to read a MiniLM stamp); the same stamp is read
    # once. Damaged stamps raise, and exceptions are not cached.
    return IndexStamp.from_metadata({key: value for key, _, value in items})


def check_binding(
    metadata: Mapping[str, Any] | None,
    contract: EmbeddingContract,
    name: str,
    *,
    configured: Mapping[str, Any] | None = None,
    require_stamp: bool = True,
    advice: str = "",
) -> None:
    """The check a store's own embedding hook makes for the index it is about to serve.

    A store that embeds by itself (Chroma's ``Collection.add``/``query`` calling its embedding
    function) hands ctxemb's function the texts and nothing else; the adapter finds the index the
    call serves and asks this first, so that nothing is embedded for an index of another
    contract. It checks what the store returned with the index (its metadata, and the contract
    the store persisted for its embedding function), not the stored vectors: those are sampled
    when the index is opened through ctxemb.

    Args:
        metadata: the index's metadata as the store returned it.
        contract: the contract of the function about to embed.
        name: what the messages call the index (``"collection 'docs'"``).
        configured: the contract (a dict) the store persisted for the index's embedding
            function, if it is ctxemb's; an index without a stamp is held to it.
        require_stamp: refuse an index without a stamp. ``False`` where a handle is only being
            made (a collection created a moment ago carries no stamp yet); embedding and
            writing pass ``True``.
        advice: the adapter's next step for an index without a stamp (its own calls).

    Raises:
        ContractMismatchError: the stamp (or, without one, the persisted function) holds
            another contract; the differing fields are named.
        DamagedStampError: a stamp that cannot be read.
        MissingStampError: no stamp, with ``require_stamp``.
    """
    if IndexStamp.is_stamped(metadata):
        _read_stamp(IndexStamp.metadata_items(metadata)).check_contract(contract)
        return
    if configured is not None:
        try:
            persisted = EmbeddingContract.from_dict(dict(configured))
        except (StampError, ValueError, TypeError):
            persisted = None  # not a contract: nothing to compare; the stamp decides below
        if persisted is not None and not same_contract(persisted, contract):
            raise ContractMismatchError(persisted, contract)
    if require_stamp:
        raise MissingStampError(
            f"{name} carries no ctxemb stamp, so nothing would prove which contract wrote "
            f"its vectors; ctxemb's embedding function embeds nothing for it. {advice}".rstrip()
        )


def open_stamp(
    metadata: Mapping[str, Any] | None,
    embedder: Embedder,
    sample: tuple[Sequence[str], Sequence[str | None], Any] | None = None,
    tolerance: float = CANARY_TOLERANCE,
) -> IndexStamp:
    """The full check on open; returns the stamp or raises the error that says what is wrong.

    Raises:
        MissingStampError: no stamp.
        DamagedStampError: a stamp that cannot be read or contradicts itself.
        ContractMismatchError: the caller's contract is another one (fields named).
        EncoderDriftError: the canary does not re-embed to its stored vectors.
        ForeignVectorsError: sampled stored records were not made under this contract (e.g. a
            raw client wrote into the index with another embedding function, or without text).
    """
    stamp = IndexStamp.from_metadata(metadata)
    stamp.verify(embedder, tolerance)
    if sample is not None:
        _raise_foreign(check_stored(embedder, *sample, tolerance=tolerance))
    return stamp


def verify_index(
    metadata: Mapping[str, Any] | None,
    embedder: Embedder,
    sample: tuple[Sequence[str], Sequence[str | None], Any] | RecordCheck | None = None,
    tolerance: float = CANARY_TOLERANCE,
    *,
    records: int | None = None,
    mode: str | None = None,
    configuration: tuple[str | None, Mapping[str, Any] | None] | None = None,
) -> VerifyReport:
    """Like :func:`open_stamp`, but reports every finding instead of raising on the first.

    Args:
        sample: stored ``(ids, documents, vectors)`` to re-embed, or a :class:`RecordCheck`
            the adapter already made (page by page, for a check of every record).
        records: how many records the index holds, for the detection probability.
        mode: ``"all"`` or ``"sample"`` (default: ``"sample"`` when records were given).
        configuration: the store's persisted ``(function name, contract dict)``, if it has one.
    """
    damaged = None
    try:
        stamp: IndexStamp | None = IndexStamp.from_metadata(metadata)
    except MissingStampError:
        stamp = None
    except StampError as exc:  # damaged: there, but not to be trusted in any part
        stamp, damaged = None, str(exc)
    diff = stamp.contract.diff(embedder.contract) if stamp else None
    match = stamp is not None and same_contract(stamp.contract, embedder.contract)
    canary = None
    if stamp is not None and match:
        try:
            canary = stamp.verify(embedder, tolerance).min_cosine
        except EncoderDriftError as exc:
            canary = exc.min_cosine
    result = sample if isinstance(sample, RecordCheck) else None
    if sample is not None and result is None:
        result = check_stored(embedder, *sample, tolerance=tolerance)  # type: ignore[misc]
    result = result or RecordCheck()
    config_state = None
    if configuration is not None and stamp is not None:
        try:
            check_configuration(stamp, *configuration)
            config_state = "match"
        except ConfigurationMismatchError as exc:
            config_state = exc.detail
    return VerifyReport(
        stamped=stamp is not None or damaged is not None,
        fingerprint_match=match,
        diff=diff or None,
        canary_cosine=canary,
        sample_size=result.checked,
        sample_min_cosine=result.min_agreement,
        bad_ids=tuple(result.bad),
        tolerance=tolerance,
        damaged=damaged,
        records=records,
        mode=mode or ("sample" if sample is not None else "none"),
        configuration=config_state,
        reasons=dict(result.bad),
    )


#: The differences an index may accept by re-stamping: its stored document vectors stay valid.
RESTAMPABLE = frozenset({DiffKind.IDENTICAL, DiffKind.LABEL, DiffKind.QUERY_ONLY})


@dataclass(frozen=True)
class RestampReport:
    """What a re-stamp changed: the index's contract before and after, field by field.

    Attributes:
        old_fingerprint: the fingerprint the index carried.
        new_fingerprint: the fingerprint it carries now (equal when nothing changed).
        changes: the differing fields, index (old) and caller (new) values.
        kind: ``identical``, ``label`` or ``query_only`` (a re-embed is refused, never stamped).
    """

    old_fingerprint: str
    new_fingerprint: str
    changes: tuple[FieldChange, ...]
    kind: DiffKind

    @property
    def fields(self) -> tuple[str, ...]:
        return tuple(c.field for c in self.changes)

    @property
    def changed(self) -> bool:
        """Whether the stamp was rewritten."""
        return not same_contract(self.old_fingerprint, self.new_fingerprint, exact=True)

    def __str__(self) -> str:
        if not self.changed:
            return f"unchanged: {self.old_fingerprint[:12]}"
        shown = "; ".join(str(c) for c in self.changes)
        old, new = self.old_fingerprint[:12], self.new_fingerprint[:12]
        return f"{old} -> {new} ({self.kind.value}: {shown})"

    def to_dict(self) -> dict[str, Any]:
        return {
            "old_fingerprint": self.old_fingerprint,
            "new_fingerprint": self.new_fingerprint,
            "kind": self.kind.value,
            "changes": [{"field": c.field, "old": c.index, "new": c.caller} for c in self.changes],
        }


def restamp_stamp(
    stamp: IndexStamp, embedder: Embedder, tolerance: float = CANARY_TOLERANCE
) -> tuple[IndexStamp, RestampReport]:
    """The stamp an index gets when it deliberately accepts ``embedder``'s contract.

    Only a change that leaves the stored document vectors valid is accepted: the query side
    (``query_prefix``, a separate query encoder) and the model's name over equal weights. The
    new stamp's canary is computed with ``embedder``; before that, its document-role vectors
    must reproduce the stored canary's (all of it for a name-only change), so an encoder that
    drifted is never stamped as the index's own. The store writes the new stamp's metadata
    (:meth:`IndexStamp.to_metadata`) in one call, with its own embedding setting.

    Returns:
        The new stamp (``stamp`` itself when the contracts are identical) and the report.

    Raises:
        ContractMismatchError: the change needs the documents re-embedded (its advice points
            to migration, into a new index).
        EncoderDriftError: ``embedder`` does not reproduce the stored document vectors.
    """
    diff = stamp.contract.diff(embedder.contract)
    if diff.kind not in RESTAMPABLE:
        raise ContractMismatchError(stamp.contract, embedder.contract, stamped=True)
    report = RestampReport(
        stamp.fingerprint, embedder.contract.fingerprint, diff.changes, diff.kind
    )
    if same_contract(stamp.contract, embedder.contract, exact=True):
        stamp.verify(embedder, tolerance)
        return stamp, report
    new = IndexStamp.from_embedder(embedder, stamp.probes)
    # The query rows may differ by design; the document rows are what the index stores.
    rows = len(stamp.probes) if diff.kind is DiffKind.QUERY_ONLY else len(new.canary)
    cos = agreement(stamp.canary[:rows], new.canary[:rows])
    worst = int(np.argmin(cos))
    if not cos[worst] >= tolerance:
        role = "document" if worst < len(stamp.probes) else "query"
        probe = f"{role}: {stamp.probes[worst % len(stamp.probes)]}"
        raise EncoderDriftError(float(cos[worst]), tolerance, probe)
    return new, report


def adopt_stamp(
    embedder: Embedder,
    sample: tuple[Sequence[str], Sequence[str | None], Any] | RecordCheck,
    stored: int,
    name: str,
    tolerance: float = CANARY_TOLERANCE,
) -> IndexStamp:
    """The stamp to write on an unstamped index of ``stored`` records, once its records prove it.

    Raises:
        MissingStampError: a checked stored record is not this contract's (records without
            text included), or the index has records but none was checked.
    """
    result = sample if isinstance(sample, RecordCheck) else check_stored(embedder, *sample)
    if result.bad or (stored and result.min_agreement is None):
        raise MissingStampError(
            f"cannot adopt {name!r}: its stored vectors are not this contract's "
            f"(lowest agreement {result.min_agreement}, {len(result.bad)} of "
            f"{result.checked} sampled documents differ, or no documents to re-embed)"
        )
    return IndexStamp.from_embedder(embedder)


def sample_ranges(count: int, size: int) -> Iterator[tuple[int, int]]:
    """``(start, stop)`` offset ranges of a sample of ``size`` among ``count`` stored records.

    Half the sample is the newest records (where writes around ctxemb land), half is random.
    """
    if count <= 0 or size <= 0:
        return
    newest = max(0, count - max(1, size // 2))
    older = random.sample(range(newest), min(newest, size - (count - newest)))
    ordered = sorted([*older, *range(newest, count)])
    start = prev = ordered[0]
    for o in ordered[1:]:
        if o != prev + 1:
            yield start, prev + 1
            start = o
        prev = o
    yield start, prev + 1


# -- writes that are undone whole -------------------------------------------------------------


@contextlib.contextmanager
def deferred_interrupts() -> Iterator[None]:
    """Hold back Ctrl-C (SIGINT) until the block ends, then raise it.

    An undo that is itself interrupted would leave the index half-restored; it runs whole and
    the interrupt arrives right after. Only the main thread receives signals, so elsewhere this
    does nothing (nor where SIGINT's handler was installed outside Python).
    """
    if (
        threading.current_thread() is not threading.main_thread()
        or signal.getsignal(signal.SIGINT) is None  # a handler not from Python: not ours to swap
    ):
        yield
        return
    caught: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: caught.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if caught:
        raise KeyboardInterrupt


def undoable_write(write: Callable[[], None], undo: Callable[[], None], ids: Sequence[str]) -> None:
    """Run ``write``; if anything stops it, Ctrl-C and ``SystemExit`` included, run ``undo``.

    ``undo`` must restore the index to its state before the call (the adapter snapshots the
    records of ``ids`` first). The original error is re-raised after a successful undo; if the
    undo fails too, :class:`~ctxemb_core.errors.IncompleteWriteError` reports both and names the
    ids whose records may have changed.
    """
    try:
        write()
    except BaseException as error:
        try:
            with deferred_interrupts():
                undo()
        except Exception as undo_error:
            raise IncompleteWriteError(error, undo_error, tuple(ids)) from error
        raise


def add_missing(
    present: Callable[[list[str]], Collection[str]],
    add: Callable[[list[str], list[str], list[Any] | None], Any],
    ids: list[str],
    documents: Sequence[str],
    metadatas: list[Any] | None,
    attempts: int = 5,
) -> int:
    """Add the records whose ids the index lacks; returns how many were added.

    ``present(ids)`` says which of ``ids`` the index holds; ``add`` is the guarded add, which
    refuses ids already stored. Another writer adding some of them in between is looked at again,
    so concurrent indexers of one corpus add nothing twice and fail on nothing already there.
    """
    have: Collection[str] = ()
    for _ in range(attempts):
        have = present(ids)
        keep = [k for k, i in enumerate(ids) if i not in have]
        if not keep:
            return 0
        try:
            add(
                [ids[k] for k in keep],
                [documents[k] for k in keep],
                [metadatas[k] for k in keep] if metadatas else None,
            )
            return len(keep)
        except ExistingIdsError:
            continue  # another writer added some of them meanwhile: look again
    raise ExistingIdsError(tuple(i for i in ids if i in have))


def records_progress(total: int, progress: bool | None, embedder: Any) -> Any:
    """The bar of a check of every stored record (``verify --all``): drawn when ``progress``
    says so, and when it is ``None`` as the embedder's ``show_progress`` says, as for the
    embedder's own calls (never on its own where nobody asked)."""
    show = progress if progress is not None else getattr(embedder, "show_progress", None)
    return progress_bar(total, show, unit="record", desc="verifying")
