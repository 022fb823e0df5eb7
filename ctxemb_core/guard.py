"""Store-agnostic guard logic: what an adapter asks of an index before it writes or returns.

An adapter reads its store's metadata and a sample of stored (document, vector) pairs and hands
them here; every decision — stamped or not, which fields differ, whether the vectors in the store
are this contract's vectors — is made once, in this module.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ctxemb_core.contract import ContractDiff, DiffKind, Role
from ctxemb_core.embedder import Embedder
from ctxemb_core.errors import (
    EncoderDriftError,
    ForeignVectorsError,
    InvalidInputError,
    MissingStampError,
)
from ctxemb_core.stamp import CANARY_TOLERANCE, IndexStamp

__all__ = [
    "VerifyReport",
    "adopt_stamp",
    "check_records",
    "check_sample",
    "open_stamp",
    "sample_cosines",
    "sample_ranges",
    "verify_index",
]


@dataclass(frozen=True)
class VerifyReport:
    """What :func:`verify_index` found; ``ok`` only when every check passed.

    Attributes:
        stamped: the index carries a ctxemb stamp.
        fingerprint_match: the stamp's fingerprint equals the caller's.
        diff: the contract difference (empty when the fingerprints match or there is no stamp).
        canary_cosine: lowest cosine between the stored canary and its re-embedding (or ``None``
            when it was not computed because the contracts differ).
        sample_size: how many stored documents were re-embedded and compared.
        sample_min_cosine: the lowest cosine among them (``None`` without a sample).
        bad_ids: ids of sampled documents whose stored vector is not this contract's.
        tolerance: the cosine both checks require.
    """

    stamped: bool
    fingerprint_match: bool
    diff: ContractDiff | None
    canary_cosine: float | None
    sample_size: int
    sample_min_cosine: float | None
    bad_ids: tuple[str, ...] = field(default=())
    tolerance: float = CANARY_TOLERANCE

    @property
    def ok(self) -> bool:
        canary_ok = self.canary_cosine is not None and self.canary_cosine >= self.tolerance
        return self.stamped and self.fingerprint_match and canary_ok and not self.bad_ids

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "stamped": self.stamped,
            "fingerprint_match": self.fingerprint_match,
            "diff": [str(c) for c in self.diff.changes] if self.diff else [],
            "diff_kind": self.diff.kind.value if self.diff else DiffKind.IDENTICAL.value,
            "canary_cosine": self.canary_cosine,
            "sample_size": self.sample_size,
            "sample_min_cosine": self.sample_min_cosine,
            "bad_ids": list(self.bad_ids),
            "tolerance": self.tolerance,
        }


def sample_cosines(embedder: Embedder, documents: Sequence[str | None], vectors: Any) -> np.ndarray:
    """Cosine between each stored vector and its document re-embedded under the contract.

    A document stored without its text cannot be checked and gets ``nan``.
    """
    if len(documents) != len(vectors):
        raise InvalidInputError("documents and vectors must be of the same length")
    out = np.full(len(documents), np.nan)
    keep = [i for i, d in enumerate(documents) if isinstance(d, str)]
    if not keep:
        return out
    stored = np.asarray([np.asarray(vectors[i], dtype=np.float32) for i in keep])
    fresh = embedder.embed_float([documents[i] for i in keep], Role.DOCUMENT)  # type: ignore[misc]
    if stored.shape != fresh.shape:
        out[keep] = -1.0  # another width is another encoder
        return out
    num = (stored * fresh).sum(axis=1)
    den = np.linalg.norm(stored, axis=1) * np.linalg.norm(fresh, axis=1)
    out[keep] = num / np.maximum(den, 1e-12)
    return out


def check_sample(
    embedder: Embedder,
    ids: Sequence[str],
    documents: Sequence[str | None],
    vectors: Any,
    tolerance: float = CANARY_TOLERANCE,
) -> tuple[float | None, tuple[str, ...]]:
    """The lowest sampled cosine and the ids whose stored vectors are not this contract's."""
    if not len(ids):
        return None, ()
    cos = sample_cosines(embedder, documents, vectors)
    bad = tuple(i for i, c in zip(ids, cos, strict=True) if not np.isnan(c) and c < tolerance)
    checked = cos[~np.isnan(cos)]
    return (float(checked.min()) if checked.size else None), bad


def open_stamp(
    metadata: Mapping[str, Any] | None,
    embedder: Embedder,
    sample: tuple[Sequence[str], Sequence[str | None], Any] | None = None,
    tolerance: float = CANARY_TOLERANCE,
) -> IndexStamp:
    """The full check on open; returns the stamp or raises the error that says what is wrong.

    Raises:
        MissingStampError: no stamp.
        ContractMismatchError: the caller's contract is another one (fields named).
        EncoderDriftError: the canary does not re-embed to its stored vectors.
        ForeignVectorsError: sampled stored vectors were not made under this contract (e.g. a
            raw client wrote into the index with another embedding function).
    """
    stamp = IndexStamp.from_metadata(metadata)
    stamp.verify(embedder, tolerance)
    if sample is not None:
        ids, documents, vectors = sample
        low, bad = check_sample(embedder, ids, documents, vectors, tolerance)
        if bad:
            raise ForeignVectorsError(bad, len(ids), low if low is not None else float("nan"))
    return stamp


def verify_index(
    metadata: Mapping[str, Any] | None,
    embedder: Embedder,
    sample: tuple[Sequence[str], Sequence[str | None], Any] | None = None,
    tolerance: float = CANARY_TOLERANCE,
) -> VerifyReport:
    """Like :func:`open_stamp`, but reports every finding instead of raising on the first."""
    try:
        stamp = IndexStamp.from_metadata(metadata)
    except MissingStampError:
        stamp = None
    diff = stamp.contract.diff(embedder.contract) if stamp else None
    match = stamp is not None and not diff
    canary = None
    if stamp is not None and match:
        try:
            canary = stamp.verify(embedder, tolerance).min_cosine
        except EncoderDriftError as exc:
            canary = exc.min_cosine
    low: float | None = None
    bad: tuple[str, ...] = ()
    size = 0
    if sample is not None:
        size = len(sample[0])
        low, bad = check_sample(embedder, *sample, tolerance=tolerance)
    return VerifyReport(stamp is not None, match, diff or None, canary, size, low, bad, tolerance)


def adopt_stamp(
    embedder: Embedder,
    sample: tuple[Sequence[str], Sequence[str | None], Any],
    stored: int,
    name: str,
    tolerance: float = CANARY_TOLERANCE,
) -> IndexStamp:
    """The stamp to write on an unstamped index of ``stored`` records, once its sample proves it.

    Raises:
        MissingStampError: a sampled stored vector is not this contract's, or the index has
            records but none with text to re-embed (nothing proves whose vectors they are).
    """
    report = verify_index(None, embedder, sample, tolerance)
    if report.bad_ids or (stored and report.sample_min_cosine is None):
        raise MissingStampError(
            f"cannot adopt {name!r}: its stored vectors are not this contract's "
            f"(lowest cosine {report.sample_min_cosine}, {len(report.bad_ids)} of "
            f"{report.sample_size} sampled documents differ, or no documents to re-embed)"
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


def check_records(
    ids: Sequence[str], documents: Sequence[str], metadatas: Sequence[Any] | None
) -> tuple[list[str], list[Any] | None]:
    """Validate one batch of records before anything is embedded or written.

    Raises:
        InvalidInputError: single strings instead of lists, an empty batch, lengths that differ,
            empty or non-string ids, or an id twice in the batch.
    """
    if isinstance(ids, str) or isinstance(documents, str):
        raise InvalidInputError("ids and documents must be lists, not single strings")
    ids = list(ids)
    if not ids:
        raise InvalidInputError("nothing to add: ids is empty")
    if len(ids) != len(documents) or (metadatas is not None and len(metadatas) != len(ids)):
        raise InvalidInputError("ids, documents and metadatas must be of the same length")
    bad = [i for i in ids if not isinstance(i, str) or not i]
    if bad:
        raise InvalidInputError(f"ids must be non-empty strings, got {bad[0]!r}")
    seen: set[str] = set()
    for i in ids:
        if i in seen:
            raise InvalidInputError(f"duplicate id {i!r} in one batch")
        seen.add(i)
    return ids, list(metadatas) if metadatas is not None else None
