"""Stored records against the contract: the form a store keeps vectors in, and the check of them.

A contract's vectors as a store keeps them (:func:`storable`, :func:`stored_form`), its store's
distances as the contract's similarity (:func:`similarity`), and the comparison of stored records
with their texts re-embedded (:func:`check_stored`: angle *and* length, with
:func:`~ctxemb_core.stamp.agreement`). On open only a sample is checked: the newest records (where
writes around ctxemb land) and a uniform random draw among the older ones (:func:`sample_ranges`);
:func:`detection_probability` says how likely that sample is to include a given number of altered
older records. A record with a vector but no text cannot be re-embedded; ctxemb never writes one,
so it counts as foreign.

Part of the guard (:mod:`ctxemb_core.guard` names every function here too).
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from ctxemb_core._batches import progress_bar
from ctxemb_core.contract import EmbeddingContract, Precision, Role
from ctxemb_core.errors import ForeignVectorsError, InvalidInputError
from ctxemb_core.pooling import quantize
from ctxemb_core.stamp import CANARY_TOLERANCE, agreement

if TYPE_CHECKING:
    from ctxemb_core.embedder import Embedder

__all__ = [
    "NO_TEXT",
    "OPEN_SAMPLE",
    "OTHER_VECTOR",
    "OTHER_WIDTH",
    "RecordCheck",
    "check_stored",
    "detection_probability",
    "record_tolerance",
    "records_progress",
    "refuse_foreign",
    "refuse_vectorless",
    "sample_cosines",
    "sample_ranges",
    "similarity",
    "storable",
    "stored_form",
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


# -- the stored form of a contract's vectors ------------------------------------------------------


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


# -- stored records -------------------------------------------------------------------------------


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


# -- which records an open samples ----------------------------------------------------------------


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


def records_progress(total: int, progress: bool | None, embedder: Any) -> Any:
    """The bar of a check of every stored record (``verify --all``): drawn when ``progress``
    says so, and when it is ``None`` as the embedder's ``show_progress`` says, as for the
    embedder's own calls (never on its own where nobody asked)."""
    show = progress if progress is not None else getattr(embedder, "show_progress", None)
    return progress_bar(total, show, unit="record", desc="verifying")
